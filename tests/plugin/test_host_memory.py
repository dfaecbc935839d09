"""max_host_memory_mb as a user with a model loaded in a fixture sees it (the plugin end to end, in a subprocess)."""

from __future__ import annotations

import re

import pytest


def test_host_memory_failure_says_the_whole_process_counts_with_a_fixtures_model(pytester: pytest.Pytester) -> None:
    # The 2-core VM, 2026-11-30: torch and a 100 MB model loaded in a fixture, a body adding ~100 MB, failed with
    # "peak host RSS 447.2 MB exceeds limit 200.0 MB": nothing said 344 MB of it were there before the rounds.
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture(scope="module")
        def model():
            weights = bytearray(300 << 20)
            weights[:: 4096] = b"\\1" * len(weights[:: 4096])  # resident
            return weights

        @pytest.mark.inferscope(rounds=3, warmup=1, max_host_memory_mb=250)
        def test_infer(model):
            assert len(model) > 0
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    found = re.search(
        r"the process's peak RSS ([\d.]+) MB exceeds limit 250.0 MB\. The whole process counts, ([\d.]+) MB of it "
        r"resident before the rounds \(imports such as torch, models fixtures loaded\), ([\d.]+) MB above that",
        text,
    )
    assert found, text
    peak, start, above = map(float, found.groups())
    assert start >= 300 and above < 100 and peak == pytest.approx(start + above, abs=0.2)


def test_host_memory_added_counts_the_rounds_not_what_a_fixture_loaded(pytester: pytest.Pytester) -> None:
    # 300 MB resident from a fixture: max_host_memory_added_mb=100 passes a body that keeps nothing and fails one
    # that faults a 200 MB temporary in every call, whatever was loaded before the rounds.
    pytester.makepyfile(
        """
        import pytest

        def resident(mb):
            b = bytearray(mb << 20)
            b[:: 4096] = b"\\1" * len(b[:: 4096])
            return b

        @pytest.fixture(scope="module")
        def model():
            return resident(300)

        @pytest.mark.inferscope(rounds=3, warmup=1, max_host_memory_added_mb=100)
        def test_small(model):
            assert len(model) > 0

        @pytest.mark.inferscope(rounds=3, warmup=1, max_host_memory_added_mb=100)
        def test_big_temporary(model):
            assert len(resident(200)) > 0
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_small PASSED*", "*test_big_temporary FAILED*"])
    said = (
        r"RSS above its RSS before the rounds ([\d.]+) MB exceeds limit 100.0 MB. The peak was [\d.]+ MB, ([\d.]+) MB"
    )
    found = re.search(said, result.stdout.str())
    assert found, result.stdout.str()
    added, before = map(float, found.groups())
    assert added >= 200 and before >= 300


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_summary_and_the_index_show_the_memory_a_failing_test_took(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    """A test failed on max_host_memory_added_mb read `FAIL (max_host_memory_added_mb)` in the summary and index.md
    with no memory figure anywhere in them: they now have a host memory column where memory matters."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=1, max_host_memory_added_mb=5)
        def test_grows():
            b = bytearray(60 << 20)
            b[:: 4096] = b"\\1" * len(b[:: 4096])

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_small():
            sum(range(100))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-report=out",
                                           *xdist)  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    header = next(line for line in result.outlines if line.startswith("test ") and "verdict" in line)
    assert "host memory" in header, header
    row = next(
        line for line in result.outlines if line.startswith("test_grows.py::test_grows ") or "::test_grows " in line
    )
    found = re.search(r" \+(\d+\.\d) MB ", row)
    assert found and float(found.group(1)) >= 50, row
    md = (pytester.path / "out" / "index.md").read_text()
    assert "| Host memory |" in md and f"| +{found.group(1)} MB |" in md
