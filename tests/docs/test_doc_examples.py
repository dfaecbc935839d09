"""Every documented example runs: the Python and shell blocks of README.md and docs/*.md.

A block that is not meant to run (output, a grammar, an install line, a GPU-only benchmark) has
`<!-- not-run: reason -->` on the line before it; every other Python or shell block is run here,
so that a renamed option or a changed default breaks a test, not a user.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_NOT_RUN = re.compile(r"<!--\s*not-run:\s*(\S.*?)\s*-->\s*$")
KINETO_TRACE = ROOT / "tests" / "data" / "kineto" / "gpu_steps.json"
RUNNABLE = ("", "python", "bash", "sh", "shell", "console")

#: Fixtures the examples use beside the pipeline stand-ins (`pipeline_conftest`): a model taking measurable time.
CONFTEST = """
class Logits:
    shape = (8, 4)

class Model:
    def __call__(self, *args, **kwargs):
        sum(i * i for i in range(100_000))  # CPU-bound, as a small model on CPU torch is
        return Logits()

@pytest.fixture
def model():
    return Model()

@pytest.fixture
def batch():
    return {"input_ids": list(range(8))}

requests = texts
"""

#: What an API snippet outside pytest finds defined before it runs: a model doing CPU work, and one doing next to
#: nothing (a user's first try on a function that returns at once: no finding, no suggestion, class unclassified).
SCRIPT_PRELUDES = {
    "cpu_work": "def model(batch):\n    return sum(i * i for i in range(100_000))\n\nbatch = [1, 2, 3]\n",
    "no_work": "def model(batch):\n    return batch\n\nbatch = [1, 2, 3]\n",
}

#: A project for the shell examples: one marked test, and a script for `inferscope run`.
PROJECT_TEST = """
import pytest

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_forward():
    sum(i * i for i in range(20000))
"""
SCRIPT = "sum(i * i for i in range(20000))\n"


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    text: str
    not_run: str  # the reason, or "" for a block that runs

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            if m[1] not in RUNNABLE:
                continue  # yaml, toml: configuration, tested through the config loader's tests
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            reason = _NOT_RUN.search(before)
            line = text[: m.start()].count("\n") + 1
            out.append(Block(doc, line, m[1], m[2], reason[1] if reason else ""))
    return out


def _kind(block: Block) -> str:
    if block.lang == "python":
        return "pytest" if re.search(r"^def test_", block.text, re.M) else "script"
    return "shell"


RUN = [b for b in blocks() if not b.not_run]


def test_every_block_runs_or_says_why_not() -> None:
    for block in blocks():
        if block.not_run or _kind(block) != "shell":
            continue
        for line in _commands(block):
            assert line.split()[0] in ("pytest", "inferscope"), (
                f"{block.id}: {line!r} is neither a pytest nor an inferscope command: "
                "put <!-- not-run: reason --> on the line before the block"
            )
    assert len(RUN) >= 8


def _commands(block: Block) -> list[str]:
    lines = [ln.split("  #", 1)[0].strip() for ln in block.text.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


@pytest.mark.parametrize("block", [b for b in RUN if _kind(b) == "pytest"], ids=lambda b: b.id)
def test_pytest_example_runs(
    block: Block, pytester: pytest.Pytester, pipeline_conftest: Callable[[float, float], str]
) -> None:
    pytester.makeconftest(pipeline_conftest(0.001, 0.001) + CONFTEST)
    pytester.makepyfile(test_example=block.text)
    result = pytester.runpytest_subprocess("--inferscope-report=out", "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert "error" not in outcomes and "errors" not in outcomes, result.stdout.str()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) >= 1
    for failure in re.findall(r"^E .*$", result.stdout.str(), re.M):
        # The only failures allowed are the examples' thresholds that need a GPU to hold.
        assert "gpu_bound" in failure or "inferscope" in failure, result.stdout.str()


@pytest.mark.parametrize("prelude", SCRIPT_PRELUDES)
@pytest.mark.parametrize("block", [b for b in RUN if _kind(b) == "script"], ids=lambda b: b.id)
def test_api_example_runs_as_a_script(block: Block, prelude: str, tmp_path: Path) -> None:
    # The quick start printed result.analysis.suggestions[0].action: an IndexError for a result with no suggestion.
    script = tmp_path / "example.py"
    script.write_text(SCRIPT_PRELUDES[prelude] + block.text)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with a saved run in out/ (copied to out-a/ and out-b/) and a torch.profiler trace.json."""
    pytester.makepyfile(test_project=PROJECT_TEST)
    (pytester.path / "script.py").write_text(SCRIPT)
    pytester.runpytest_subprocess("--inferscope-report=out").assert_outcomes(passed=1)
    for name in ("out-a", "out-b"):
        shutil.copytree(pytester.path / "out", pytester.path / name)
    # `inferscope analyze trace.json` in the README: a torch.profiler (Kineto) trace, as it says.
    shutil.copy(KINETO_TRACE, pytester.path / "trace.json")
    # `pytest --inferscope-ab=origin/main` in the README: a git checkout whose origin/main is its one commit.
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "test_project.py", "script.py"], ["commit", "-qm", "one"]):
        subprocess.run([*git, *args], cwd=pytester.path, check=True, capture_output=True)
    subprocess.run([*git, "update-ref", "refs/remotes/origin/main", "HEAD"], cwd=pytester.path, check=True)
    return pytester


@pytest.mark.parametrize("block", [b for b in RUN if _kind(b) == "shell"], ids=lambda b: b.id)
def test_shell_example_runs(block: Block, project: pytest.Pytester) -> None:
    inferscope = Path(sys.executable).with_name("inferscope")
    for line in _commands(block):
        argv = shlex.split(line)
        if argv[0] == "pytest":
            result = project.runpytest_subprocess(*argv[1:], "-p", "no:randomly")
            # 0 passed, 1 a test failed (a gate may fire), 5 none collected; 2-4 are usage or internal errors.
            assert result.ret in (0, 1, 5), f"{block.id}: {line}\n{result.stdout.str()}\n{result.stderr.str()}"
            assert "INTERNALERROR" not in result.stdout.str()
        else:
            exe = str(inferscope) if inferscope.exists() else "inferscope"
            done = subprocess.run([exe, *argv[1:]], cwd=project.path, capture_output=True, text=True, timeout=120)
            assert done.returncode in (0, 1), f"{block.id}: {line}\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, f"{block.id}: {line}\n{done.stderr}"


def _output_pattern(line: str) -> str:
    """A printed line as an fnmatch pattern: numbers (a duration with its unit, ms or s, which follows the number),
    column padding and `<cwd>` match anything."""
    line = line.replace("<cwd>", "*")
    line = re.sub(r"\(\d+%\)", "(*)", line)
    line = re.sub(r"\s*±?\s*\b\d[\d.,]*(?:%|x)?(?: m?s\b)?(?=[\s,)]|$)", "*", line)
    line = re.sub(r"\s{2,}", "*", line)  # column widths follow the widest cell
    return re.sub(r"\*(\s*\*)+", "*", line)


def test_quickstart_output_matches_a_real_run(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    (block,) = [b.text for b in blocks() if b.doc.name == "quickstart.md" and b.text.startswith("=====")]
    printed = [ln for ln in block.splitlines() if ln.strip()]
    assert "pytest tests/test_inference.py --inferscope-report=inferscope-report" in text
    report = f"--inferscope-report={tmp_path / 'inferscope-report'}"
    # As in a CI log: no terminal, no COLUMNS. The environment given whole: a parent that loaded GNU readline (this
    # pytest may have) put COLUMNS=80 in the process's own environment, which a child inherits but os.environ lacks.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    from pytest_inferscope.gpus import driver_missing

    no_gpu = "gpu not collected (no NVIDIA GPU or driver on this machine)"
    assert any(no_gpu in ln for ln in printed)  # the doc shows a machine without a GPU
    if driver_missing() is None:  # a GPU machine: its GPUs hidden, the run is the doc's but for the reason given
        env["CUDA_VISIBLE_DEVICES"] = "-1"
        printed = [ln.replace(no_gpu, "gpu not collected (CUDA_VISIBLE_DEVICES hides every GPU)") for ln in printed]
    else:  # the doc's machine: an empty or -1 CUDA_VISIBLE_DEVICES here would be the reason given instead
        env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_inference.py", report, "-p", "no:randomly"],
        cwd=ROOT / "example_project", capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    got = done.stdout[done.stdout.index("= inferscope =") - 34 :].splitlines()
    result = pytest.LineMatcher(got)
    result.fnmatch_lines([_output_pattern(ln) for ln in printed], consecutive=True)
