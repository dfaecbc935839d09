"""What the plugin imports in a session, by what the session asks of it (issue 16: the fixed cost per session).

Installed but unused, the plugin must not load numpy, Jinja2, the analyzer or the report writers: on the
2-core development VM they took ~0.3-0.6 s of every pytest session (2026-11-28). Nor must the pytest header
(shown without -q) choose a GPU backend, which loads the collectors and CUPTI. Profiling without a report
folder needs numpy and the analyzer, not Jinja2 or the report writers; no profiling session needs numpy.ma.
Each case runs pytest in a fresh process (this test session has numpy loaded already) and reads `sys.modules`
as the session ends. What the environment's other pytest plugins load is not the plugin's: a session without it
(`-p no:inferscope`) says what that is (jaxtyping's plugin loads numpy on the H200 hosts, 2026-12-01).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

HEAVY = (
    "numpy",
    "numpy.ma",  # np.unique's plain call imports it at its first use (numpy 2.4): events.unique does not
    "jinja2",
    "pytest_inferscope.analyzer",
    "pytest_inferscope.collectors",
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
#: A conftest line that makes the session see a GPU's device files, as on a GPU machine.
AS_ON_A_GPU_MACHINE = """
import pytest_inferscope.session
pytest_inferscope.session.device_missing = lambda: None
"""
#: auto samples in the test thread by the C clock's pending calls (no signal sent; options.sampler_in_use)
UNUSED_HEADER = "inferscope: cpu stack sampling every 10 ms in the test thread; memory procfs; gpu {}"


@pytest.fixture(scope="module")
def others(tmp_path_factory: pytest.TempPathFactory) -> frozenset[str]:
    """The heavy modules a session loads without this plugin: the environment's other plugins' (none on CI)."""
    path = tmp_path_factory.mktemp("without_inferscope")
    (path / "conftest.py").write_text(RECORDER)
    (path / "test_one.py").write_text("def test_one():\n    pass\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:inferscope", "-p", "no:randomly", "-p", "no:cacheprovider", "-q"]
    subprocess.run(argv, cwd=path, capture_output=True, text=True, timeout=120, check=True)
    modules = set(json.loads((path / "modules.json").read_text()))
    assert "pytest_inferscope.plugin" not in modules, "-p no:inferscope left the plugin loaded"
    return frozenset(m for m in HEAVY if m in modules)


@pytest.fixture(autouse=True)
def _default_gpu_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU collection as by default (a GPU check runs everything with INFERSCOPE_GPU=required)."""
    for name in ("INFERSCOPE_GPU", "INFERSCOPE_COLLECTOR"):
        monkeypatch.delenv(name, raising=False)


def run(pytester: pytest.Pytester, *args: str, conftest: str = "", passed: int = 1) -> tuple[set[str], list[str]]:
    """A pytest session with `args` in a fresh process: the heavy modules it loaded, and its inferscope header."""
    pytester.makeconftest(RECORDER + conftest)
    pytester.makepyfile(test_one="def test_one():\n    assert sum(range(10)) == 45\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=passed)
    modules = set(json.loads((pytester.path / "modules.json").read_text()))
    assert "pytest_inferscope.plugin" in modules
    header = [line for line in result.outlines if line.startswith("inferscope: cpu")]
    return {m for m in HEAVY if m in modules}, header


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("CUDA_VISIBLE_DEVICES", "-1", "CUDA_VISIBLE_DEVICES hides every GPU"),  # no GPU, whatever the machine
        ("INFERSCOPE_GPU", "off", "switched off (--inferscope-gpu=off)"),
    ],
)
def test_the_plugin_installed_but_unused_loads_nothing_heavy(
    variable: str,
    value: str,
    why: str,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    others: frozenset[str],
) -> None:
    monkeypatch.setenv(variable, value)
    heavy, header = run(pytester)
    assert heavy - others == set()
    assert header == [UNUSED_HEADER.format(f"not collected ({why})")]


def test_on_a_gpu_machine_the_header_of_an_unused_plugin_chooses_no_backend(
    pytester: pytest.Pytester, others: frozenset[str]
) -> None:
    heavy, header = run(pytester, conftest=AS_ON_A_GPU_MACHINE)
    assert heavy - others == set()
    assert header == [UNUSED_HEADER.format("auto (the backend is chosen as the first test is profiled)")]


def test_the_header_says_what_choosing_a_backend_would(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_inferscope.collectors.gpu import select_backend
    from pytest_inferscope.gpus import GPU_OFF, device_missing

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    said = "not collected (CUDA_VISIBLE_DEVICES hides every GPU)"
    assert select_backend("auto").describe() == said == f"not collected ({device_missing()})"
    assert select_backend("off").describe() == f"not collected ({GPU_OFF})"


def test_profiling_without_a_report_folder_loads_no_report_writers(
    pytester: pytest.Pytester, numpy_imports_ma: bool
) -> None:
    heavy, _ = run(pytester, "--inferscope-all", "--inferscope-gpu=off")
    assert {"numpy", "pytest_inferscope.analyzer", "pytest_inferscope.collectors"} <= heavy  # it profiled the test
    assert heavy.isdisjoint({"jinja2", "pytest_inferscope.reporters.folder", "pytest_inferscope.reporters.html"})
    assert "numpy.ma" not in heavy or numpy_imports_ma  # numpy 1.x loads it with numpy


def test_a_report_folder_loads_the_report_writers(pytester: pytest.Pytester, numpy_imports_ma: bool) -> None:
    heavy, _ = run(pytester, "--inferscope-all", "--inferscope-gpu=off", "--inferscope-report=out")
    assert {"jinja2", "pytest_inferscope.reporters.folder", "pytest_inferscope.reporters.html"} <= heavy
    assert "numpy.ma" not in heavy or numpy_imports_ma  # numpy 1.x loads it with numpy
    assert (pytester.path / "out" / "index.html").is_file()


def test_profiling_every_test_chooses_the_backend_for_the_header(pytester: pytest.Pytester) -> None:
    # --inferscope-all profiles every test: the header names what will collect, as the summary's line does after.
    _, lines = run(pytester, "--inferscope-all", conftest=AS_ON_A_GPU_MACHINE)
    assert len(lines) == 2 and lines[0] == lines[1] and "the backend is chosen" not in lines[0]


def test_with_a_marked_test_the_summary_names_the_backend_the_header_left_open(pytester: pytest.Pytester) -> None:
    from pytest_inferscope.gpus import device_missing

    pytester.makepyfile(test_marked="import pytest\n\n@pytest.mark.inferscope(rounds=2)\ndef test_two():\n    pass\n")
    _, lines = run(pytester, conftest=AS_ON_A_GPU_MACHINE, passed=2)  # test_one unmarked, test_two profiled
    assert len(lines) == 2
    assert lines[0] == UNUSED_HEADER.format("auto (the backend is chosen as the first test is profiled)")
    missing = device_missing()  # what choosing the backend found on this machine
    if missing is not None:
        assert lines[1] == UNUSED_HEADER.format(f"not collected ({missing})")
    else:
        assert "the backend is chosen" not in lines[1] and "not collected" not in lines[1]


def test_the_collectors_import_no_pytest() -> None:
    # `measure()` and `inferscope run` collect outside pytest: choosing a GPU backend must not need it.
    import subprocess
    import sys

    code = "import sys, pytest_inferscope.collectors.gpu; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_gpu_pin_after_cuda_started_is_refused_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from pytest_inferscope.gpus import pin_gpu

    cuda = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.delenv("INFERSCOPE_AB_TWIN", raising=False)
    monkeypatch.setattr("pytest_inferscope.gpus.driver_missing", lambda: None)  # as on a GPU machine
    config = types.SimpleNamespace(getoption=lambda name, default=None: default)
    with pytest.raises(pytest.UsageError, match=r"--inferscope-gpus=1,2: CUDA was already started .* GPU 1 can no"):
        pin_gpu(config, (1, 2))  # type: ignore[arg-type]


def test_the_reporters_package_names_each_public_name_once_and_loads_it() -> None:
    import pytest_inferscope.reporters as reporters

    assert sorted(reporters.__all__) == sorted(reporters._WHERE)
    for name in reporters.__all__:
        assert getattr(reporters, name).__module__.startswith("pytest_inferscope.reporters.")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        reporters.nothing_here  # noqa: B018


def test_collecting_a_marked_test_only_loads_nothing_heavy(pytester: pytest.Pytester, others: frozenset[str]) -> None:
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_one="import pytest\n\n@pytest.mark.inferscope(rounds=2)\ndef test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    modules = set(json.loads((pytester.path / "modules.json").read_text()))
    assert "pytest_inferscope.plugin" in modules and not {m for m in HEAVY if m in modules} - others


def test_the_package_names_each_public_name_once_and_loads_it() -> None:
    import pytest_inferscope

    assert sorted(pytest_inferscope.__all__) == sorted([*pytest_inferscope._WHERE, "InferscopeWarning"])
    for name, where in pytest_inferscope._WHERE.items():
        assert getattr(pytest_inferscope, name) is getattr(sys.modules[f"pytest_inferscope.{where}"], name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        pytest_inferscope.nothing_here  # noqa: B018


#: A host that takes the plugin's modules out of sys.modules after a run, as pytester's in-process runs do, and then
#: loads `api` again (the plugin's next session does): `measure` and `scope` must write to the same collection.
MODULES_TAKEN_OUT = """
import sys
import pytest_inferscope
pytest_inferscope.measure(lambda: None, rounds=1, warmup=0)  # api and api_measure loaded, the package's attributes set
for name in [m for m in sys.modules if m.startswith("pytest_inferscope.")]:
    del sys.modules[name]
import pytest_inferscope.api  # noqa: E402  (as the plugin's next session loads it)
from pytest_inferscope import measure, scope

def work():
    with scope("inner"):
        sum(range(1000))

print([s.path for s in measure(work, rounds=2, warmup=0).analysis.scopes])
"""


def test_public_names_follow_the_modules_a_host_loaded_again(pytester: pytest.Pytester) -> None:
    """`from . import api_measure` took the package's attribute, a module already out of sys.modules, whose collection
    was not the one `scope` wrote to: the scope went unseen (`[]`)."""
    script = pytester.makepyfile(modules_taken_out=MODULES_TAKEN_OUT)
    result = pytester.run(sys.executable, str(script))
    assert result.ret == 0, result.stderr.str()
    assert result.outlines[-1] == "['inner']"
