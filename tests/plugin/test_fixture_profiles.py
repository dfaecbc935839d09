"""The `inferscope` fixture profiles the test that asks for it: the README's example as written."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The README's example's fixtures beside the pipeline stand-ins (`pipeline_conftest`, here 2 ms and 3 ms a stage).
CONFTEST = """
@pytest.fixture
def model():
    return lambda batch: sum(batch)

@pytest.fixture
def batch():
    return list(range(100))
"""


def readme_example() -> str:
    """The README's first Python block, exactly as a user copies it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match is not None, "README.md has no ```python block"
    assert "def test_pipeline(pipeline, texts, inferscope)" in match[1]
    return match[1]


def _check_pipeline_report(out: Path) -> None:
    (d,) = [p for p in out.iterdir() if p.is_dir() and "test_pipeline" in p.name]
    data = json.loads((d / "report.json").read_text())
    scopes = {s["path"]: s for s in data["analysis"]["scopes"] if s["kind"] == "scope"}
    assert set(scopes) == {"tokenize", "forward"}
    assert scopes["tokenize"]["mean_ms"] >= 2.0 and scopes["forward"]["mean_ms"] >= 3.0  # the sleeps
    assert [(m["name"], m["attrs"]) for m in data["marks"]] == [("batch_ready", {"size": 3})]
    md = (d / "report.md").read_text()
    assert "tokenize" in md and "batch_ready" in md
    assert "tokenize" in (d / "report.html").read_text()
    index = (out / "index.md").read_text()
    assert "test_pipeline" in index and "test_batch_inference" in index


def _junit_props(path: Path, name: str) -> dict[str, str]:
    (case,) = [c for c in ET.parse(path).iter("testcase") if c.get("name") == name]
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_readme_fixture_example_is_profiled_as_written(
    pytester: pytest.Pytester, xdist: list[str], pipeline_conftest: Callable[[float, float], str]
) -> None:
    pytester.makeconftest(pipeline_conftest(0.002, 0.003) + CONFTEST)
    pytester.makepyfile(test_readme=readme_example())
    # max_latency_ms=25 holds: model(batch) sums 100 numbers; expect_bottleneck="gpu_bound" cannot hold
    # without a GPU, so that test fails with its evidence, as the README's marker asks.
    result = pytester.runpytest(*xdist, "--inferscope-report=out", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*= inferscope =*"])
    result.stdout.fnmatch_lines(["test_readme.py::test_pipeline * 1 *pass*"])
    _check_pipeline_report(pytester.path / "out")
    props = _junit_props(pytester.path / "junit.xml", "test_pipeline")
    assert props["inferscope.rounds"] == "1" and props["inferscope.marks"] == "1"
    assert float(props["inferscope.scope.forward.mean_ms"]) >= 3.0
    assert props["inferscope.report"].endswith("report.md")


def test_fixture_rounds_follow_the_options_and_a_marker_gives_thresholds(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        CALLS = []

        def test_plain(inferscope):
            CALLS.append(1)

        @pytest.mark.inferscope(max_latency_ms=0.000001, rounds=2, warmup=0)
        def test_marked(inferscope):
            pass

        def test_count():
            assert len(CALLS) == 3  # --inferscope-rounds=2 --inferscope-warmup=1
        """
    )
    result = pytester.runpytest("--inferscope-rounds=2", "--inferscope-warmup=1", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_marked*max_latency_ms*"])
    result.stdout.fnmatch_lines(["*test_plain * 2 *pass*"])
    off = pytester.runpytest("--inferscope-disable", "-p", "no:randomly", "-k", "not count")
    off.assert_outcomes(passed=2)
    assert "= inferscope =" not in off.stdout.str()


def test_profile_inside_a_fixture_test_takes_over(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import time

        def test_block(inferscope):
            with inferscope.profile("block") as p:
                time.sleep(0.002)
            assert p.result.latency.median >= 2.0
            assert inferscope.result is None
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "--inferscope-rounds=3")
    result.assert_outcomes(passed=1)
    # The block's result is the measurement; the test leaves no report of its own.
    assert not (pytester.path / "out" / "index.md").exists()


def test_under_inferscope_all_a_test_that_profiles_itself_takes_over_and_a_marked_one_is_told(
    pytester: pytest.Pytester,
) -> None:
    """`--inferscope-all` on a suite whose tests call `measure()`, `profile()` or `measure_async()` themselves: those
    tests pass, their own calls measure (their rounds by the plugin stop, and they leave no report of their own).
    Once, they failed: "a collection ... is already running". A marked test doing so is told why, naming both."""
    pytester.makepyfile(
        test_self="""
        import asyncio, time
        import pytest
        import pytest_inferscope as isc

        def work():
            time.sleep(0.001)

        CALLS = {"n": 0}

        def test_measure():
            CALLS["n"] += 1
            assert len(isc.measure(work, rounds=3, warmup=1).latency.samples_ms) == 3

        def test_profile():
            with isc.profile("inner") as p:
                work()
            assert p.result is not None

        def test_fixture_profile(inferscope):
            with inferscope.profile("block") as p:
                work()
            assert p.result is not None and inferscope.result is None

        def test_measure_async():
            async def awork():
                work()
            assert len(asyncio.run(isc.measure_async(awork, rounds=2, warmup=0)).latency.samples_ms) == 2

        def test_plain():
            work()

        def test_zz_measured_once():
            assert CALLS["n"] == 1  # the plugin's rounds of test_measure stopped when its measure() took over

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_marked():
            isc.measure(work, rounds=3, warmup=1)
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-all", "--inferscope-rounds=3",
                                "--inferscope-report=out")  # fmt: skip
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*'work' cannot be profiled inside 'test_self.py::test_marked', which is profiled*"])
    rows = {line.split()[0] for line in result.outlines if line.startswith("test_self.py::")}
    assert rows == {"test_self.py::test_plain", "test_self.py::test_zz_measured_once", "test_self.py::test_marked"}

    # under A/B (the same interpreter as the other side): the turns stop at the call too, on both sides
    ab = pytester.runpytest("-p", "no:randomly", "--inferscope-all", "--inferscope-rounds=3",
                            f"--inferscope-ab-python={sys.executable}", "-k", "not marked")  # fmt: skip
    ab.assert_outcomes(passed=6)


def test_the_fixture_asked_for_while_an_unprofiled_test_runs_fails_it_with_what_to_do(
    pytester: pytest.Pytester,
) -> None:
    """request.getfixturevalue('inferscope') comes after the tests to profile were chosen: in a test that is not
    profiled its scopes and result did nothing, silently. Named (argument, usefixtures, a fixture's argument) or in a
    marked test, the fixture profiles as ever; with the plugin switched off it does nothing, as documented."""
    pytester.makepyfile(
        test_dyn="""
        import pytest

        def test_dynamic(request):
            handle = request.getfixturevalue("inferscope")
            with handle.scope("x"):
                pass

        @pytest.mark.inferscope(rounds=2, warmup=0)
        def test_dynamic_marked(request):
            assert request.getfixturevalue("inferscope").profiled

        @pytest.mark.usefixtures("inferscope")
        def test_used(request):
            assert request.getfixturevalue("inferscope").profiled

        @pytest.fixture
        def wrap(inferscope):
            return inferscope

        def test_through_a_fixture(wrap):
            assert wrap.profiled
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1, passed=3)
    result.stdout.fnmatch_lines(
        [
            "request.getfixturevalue('inferscope') in test_dyn.py::test_dynamic, which is not profiled: *Name the "
            "fixture as an argument (def test_x(inferscope): ...) or with @pytest.mark.usefixtures('inferscope'), or "
            "mark the test @pytest.mark.inferscope; *pytest_inferscope.profile() or measure().",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    disabled = pytester.runpytest("-p", "no:randomly", "--inferscope-disable", "-k", "test_dynamic and not marked")
    disabled.assert_outcomes(passed=1)


def test_the_result_a_test_and_the_hook_see_names_the_folder_its_reports_went_to(pytester: pytest.Pytester) -> None:
    # The fixture's result and the pytest_inferscope_result hook's named the files (relative) and not their folder,
    # which a conftest uploading them had to read from the option again; result.report_dir now names it.
    pytester.makeconftest(
        """
        SEEN = []

        def pytest_inferscope_result(config, result):
            SEEN.append(result.report_dir / result.files["md"])
        """
    )
    pytester.makepyfile(
        """
        import pytest
        from pathlib import Path
        from conftest import SEEN

        @pytest.fixture
        def check(inferscope):
            yield
            assert inferscope.result.report_dir.resolve() == Path("out").resolve()
            assert SEEN == [inferscope.result.report_dir / inferscope.result.files["md"]]

        def test_x(check, inferscope):
            pass
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    assert list((pytester.path / "out").glob("*/report.md"))
