"""What the plugin imports in a session, by what the session asks of it (issue 16: the fixed cost per session).

Installed but unused, the plugin must not load numpy, Jinja2, the analyzer or the report writers: on the
2-core development VM they took ~0.6 s of every pytest session (2026-11-28). Profiling without a report
folder needs numpy and the analyzer, not Jinja2 or the report writers. Each case runs pytest in a fresh
process (this test session has numpy loaded already) and reads `sys.modules` as the session ends.
"""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

HEAVY = (
    "numpy",
    "jinja2",
    "pytest_inferscope.analyzer",
    "pytest_inferscope.merger",
    "pytest_inferscope.reporters.folder",
    "pytest_inferscope.reporters.html",
    "pytest_inferscope.reporters.trace",
)

RECORDER = """
import json, sys

def pytest_unconfigure(config):
    with open("modules.json", "w") as f:
        json.dump(sorted(sys.modules), f)
"""


def loaded(pytester: pytest.Pytester, *args: str) -> set[str]:
    """The heavy modules loaded by the end of a pytest session with `args`, in a fresh process."""
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_one="def test_one():\n    assert sum(range(10)) == 45\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    modules = set(json.loads((pytester.path / "modules.json").read_text()))
    assert "pytest_inferscope.plugin" in modules or "-p" in args  # the plugin was loaded (or refused on purpose)
    return {m for m in HEAVY if m in modules}


def test_the_plugin_installed_but_unused_loads_nothing_heavy(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The header (pytest without -q) says why no GPU is collected: where there is none, without the collectors.
    # On a GPU machine it names the backend, which loads them: the GPU is hidden here so the check holds anywhere.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert loaded(pytester) == set()


def test_the_header_says_what_choosing_a_backend_would(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_inferscope.collectors.gpu import select_backend
    from pytest_inferscope.gpus import device_missing

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    line = f"gpu {select_backend('auto').describe()}"
    assert (
        line == "gpu not collected (CUDA_VISIBLE_DEVICES hides every GPU)" == f"gpu not collected ({device_missing()})"
    )
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.stdout.fnmatch_lines([f"inferscope: cpu stack sampling every 10 ms; memory procfs; {line}"])


def test_profiling_without_a_report_folder_loads_no_report_writers(pytester: pytest.Pytester) -> None:
    heavy = loaded(pytester, "--inferscope-all", "--inferscope-gpu=off")
    assert "pytest_inferscope.analyzer" in heavy  # it profiled and analysed the test
    assert heavy.isdisjoint({"jinja2", "pytest_inferscope.reporters.folder", "pytest_inferscope.reporters.html"})


def test_a_report_folder_loads_the_report_writers(pytester: pytest.Pytester) -> None:
    heavy = loaded(pytester, "--inferscope-all", "--inferscope-gpu=off", "--inferscope-report=out")
    assert {"jinja2", "pytest_inferscope.reporters.folder", "pytest_inferscope.reporters.html"} <= heavy
    assert (pytester.path / "out" / "index.html").is_file()
