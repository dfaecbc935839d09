"""The trace size setting, from each place a user can give it, reaches the GPU backend's record cap."""

from __future__ import annotations

import pytest

from pytest_inferscope.events import EVENT_DTYPE

MB3_RECORDS = 3 * (1 << 20) // EVENT_DTYPE.itemsize  # what 3 MB holds

#: Both backends are made to fail after noting the cap they were created with, so the test runs
#: without a GPU: the choice then falls back to CPU-only collection, which is what a user sees
#: on a machine without one.
CONFTEST = """
from pytest_inferscope.collectors import gpu, gpu_cuptipy, gpu_native

SEEN = []

def _create(**kwargs):
    SEEN.append(kwargs.get("max_records"))
    raise RuntimeError("a test backend")

# the backend is chosen at session start, before any fixture; the run is a subprocess of its own
gpu.device_missing = lambda: None
gpu_native.create = gpu_cuptipy.create = _create
"""

TESTS = """
import pytest
from conftest import SEEN

@pytest.mark.inferscope(rounds=1, warmup=0)
def test_profiled():
    pass

def test_cap():
    assert SEEN == [{expected}, {expected}], SEEN
"""


@pytest.mark.parametrize("where", ["option", "ini", "env", "file"])
def test_the_trace_size_setting_caps_the_gpu_records(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.delenv("INFERSCOPE_TRACE_SIZE_MB", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(TESTS.format(expected=MB3_RECORDS))
    args = ["-p", "no:cacheprovider"]
    if where == "option":
        args.append("--inferscope-trace-size-mb=3")
    elif where == "ini":
        pytester.makeini("[pytest]\ninferscope_trace_size_mb = 3\n")
    elif where == "env":
        monkeypatch.setenv("INFERSCOPE_TRACE_SIZE_MB", "3")
    else:
        pytester.path.joinpath(".inferscope.yaml").write_text("trace_size_mb: 3\n")
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=2)


SPILLING = """
import pytest

def f(i):
    return i + 1

@pytest.mark.inferscope(rounds=2, warmup=0, cpu="trace")
def test_calls():
    for i in range(20000):
        f(i)
"""


def test_a_spilled_trace_is_in_the_report_and_its_spill_files_are_removed(pytester: pytest.Pytester) -> None:
    # Every spill file stayed in the folder after the run (TraceBuffer.clear was never called): 183 files a run of this
    # test, more at every run, in a folder the user gave.
    pytester.makepyfile(SPILLING)
    spill = pytester.path / "spill"
    result = pytester.runpytest_subprocess(
        "--inferscope-trace-size-mb=0.01", f"--inferscope-trace-spill={spill}", "--inferscope-report=out"
    )
    result.assert_outcomes(passed=1)
    assert spill.is_dir() and list(spill.iterdir()) == []
    (report,) = pytester.path.glob("out/*/report.json")
    assert '"dropped_events": 0' in report.read_text()  # spilled, not lost


def test_a_spill_folder_that_is_a_file_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    # It was taken, and the test whose buffer filled failed mid-round on the plugin's own FileExistsError.
    pytester.makepyfile(SPILLING)
    (pytester.path / "afile").write_text("mine\n")
    result = pytester.runpytest_subprocess("--inferscope-trace-size-mb=0.01", "--inferscope-trace-spill=afile")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--inferscope-trace-spill='afile' is a file, not a folder: leave it unset*"])
    assert (pytester.path / "afile").read_text() == "mine\n"
