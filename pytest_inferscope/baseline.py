"""Stored baselines: per-test round samples and metrics under a name (judged in `regression`).

One JSON file per name in the baseline folder (`.inferscope/baselines/<name>.json` by default):

    {"format": "pytest-inferscope-baseline", "schema_version": 1, "name": "main",
     "tests": {"<node id>": [<entry>, <entry>, ...]}}     # oldest first

An entry is one saved run of one test: its round samples, the speed-probe readings around them
(when the run took them; see `drift`), the deterministic metrics, the bottleneck class, the
environment fingerprint, a timestamp and the result schema version.
Saving appends entries and never drops or edits earlier ones; the whole file is rewritten
atomically and durably, after the old one has been read and validated, so a failed or
interrupted run leaves the previous file exactly as it was. A file that cannot be read, is not
JSON, is someone else's JSON or comes from a newer version is an error and is never written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .reporters.files import atomic_write_text
from .results import TestResult
from .units import fmt_count

FORMAT = "pytest-inferscope-baseline"
BASELINE_SCHEMA_VERSION = 1
DEFAULT_DIR = Path(".inferscope") / "baselines"
#: Environment key → how a difference is named. Missing keys are recorded as "none".
FINGERPRINT_KEYS = {
    "gpu_model": "GPU model",
    "driver": "GPU driver",
    "cuda": "CUDA version",
    "torch": "torch version",
    "python": "Python version",
    "cpu_model": "CPU model",
    "plugin_version": "pytest-inferscope version",
    "pinned_gpu": "GPU pinned to this worker (--inferscope-gpus)",
    "tracer": "Python tracer or profiler (coverage, a debugger)",
}
#: Keys that say which of several alike GPUs ran a test, not what it ran on: under `-n N --inferscope-gpus`
#: xdist hands a test to whichever worker is free, so it moves between slots from run to run. A move alone
#: (the GPU model, driver and software the same) is said, not made a reason to skip the comparison.
SLOT_KEYS = ("pinned_gpu",)
#: Per-round counts that do not depend on timing noise: compared exactly unless given a tolerance.
DETERMINISTIC_METRICS = ("gpu.kernel_launches_per_round", "gpu.h2d_bytes_per_round", "gpu.d2h_bytes_per_round")
#: The environment's key naming the facts other plugins added (pytest_inferscope_machine_info): fingerprinted too.
MACHINE_INFO_KEYS = "machine_info_keys"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # no leading dot: no hidden files, '.' or '..'


class BaselineError(Exception):
    """A baseline cannot be saved or loaded; the message names the file or name and what is wrong."""


def _none_completed(profiled: int) -> str:
    """Why a baseline saved nothing, counting the profiled tests."""
    if profiled == 1:
        return "the one profiled test did not complete its rounds"
    return f"none of the {profiled} profiled tests completed its rounds"


def validate_name(name: str) -> str:
    """Return `name` if it can name a baseline file, else raise BaselineError saying what is allowed."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BaselineError(
            f"Invalid baseline name {name!r}: use 1 to 100 letters, digits, '.', '-' and '_', not starting "
            "with '.', and no path separators (the name becomes <name>.json in the baseline folder; choose "
            "the folder with --inferscope-baseline-dir). Examples: 'main', 'release-1.2', 'pr_123'; a git branch "
            "such as 'feature/x' as 'feature-x' (in bash, ${BRANCH//\\//-})."
        )
    return name


def fingerprint(environment: Mapping[str, Any]) -> dict[str, str]:
    """The environment facts a comparison is only fair under (see FINGERPRINT_KEYS, and the facts of the
    pytest_inferscope_machine_info hook, which the environment names under MACHINE_INFO_KEYS), as strings."""
    env = {"driver": environment.get("gpu_driver"), **{k: v for k, v in environment.items() if v is not None}}
    keys = [*FINGERPRINT_KEYS, *(str(k) for k in environment.get(MACHINE_INFO_KEYS) or () if k not in FINGERPRINT_KEYS)]
    return {k: "none" if env.get(k) in (None, "") else str(env[k]) for k in keys}


def slot_change(a: Mapping[str, str], b: Mapping[str, str]) -> str:
    """'baseline on GPU 0, this run on GPU 1' when the pinned GPU differs (SLOT_KEYS); '' when it does not, or when
    neither side had a GPU (a baseline saved before a pin without one was ignored recorded 'pinned_gpu': '0')."""
    if a.get("gpu_model", "none") == b.get("gpu_model", "none") == "none":
        return ""
    before, after = (
        f"GPU {x}" if x != "none" else "the unpinned GPU"
        for x in (a.get("pinned_gpu", "none"), b.get("pinned_gpu", "none"))
    )
    return "" if before == after else f"baseline on {before}, this run on {after}"


def fingerprint_diff(a: Mapping[str, str], b: Mapping[str, str], ignore: Collection[str] = ()) -> list[str]:
    """One sentence per fingerprint key that differs between a (the baseline) and b (this run)."""
    keys = [k for k in dict.fromkeys([*FINGERPRINT_KEYS, *a, *b]) if k not in ignore]
    pairs = [(FINGERPRINT_KEYS.get(k, k), a.get(k, "none"), b.get(k, "none")) for k in keys]
    return [f"{what} differs: baseline {va!r}, this run {vb!r}." for what, va, vb in pairs if va != vb]


@dataclass
class BaselineEntry:
    """One saved run of one test."""

    nodeid: str
    samples_ms: list[float]
    metrics: dict[str, float] = field(default_factory=dict)
    bottleneck: str = ""
    confidence: float = 0.0
    fingerprint: dict[str, str] = field(default_factory=dict)
    timestamp: str = ""
    schema_version: int = 0  # of the result the entry was taken from (results.SCHEMA_VERSION)
    rounds: int = 0
    warmup: int = 0
    probe_ms: list[float] = field(default_factory=list)  # drift.probe_ms before each round and after the last

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        del d["nodeid"]  # the key it is stored under
        return d

    @classmethod
    def from_dict(cls, nodeid: str, data: Mapping[str, Any]) -> BaselineEntry:
        """From a validated file entry (see _structure_problem); keys it doesn't know are ignored."""
        known = {"bottleneck", "confidence", "timestamp", "schema_version", "rounds", "warmup"}
        kw = {k: v for k, v in data.items() if k in known}
        fp = {str(k): str(v) for k, v in data.get("fingerprint", {}).items()}
        probe = [float(x) for x in data.get("probe_ms", [])]
        samples = [float(x) for x in data["samples_ms"]]
        return cls(nodeid, samples, dict(data.get("metrics", {})), fingerprint=fp, probe_ms=probe, **kw)

    @classmethod
    def from_result(cls, result: TestResult, fp: dict[str, str], timestamp: str) -> BaselineEntry:
        m = result.analysis.metrics
        metrics = {k: float(v) for k in DETERMINISTIC_METRICS if (v := m.get(k)) is not None and math.isfinite(v)}
        confidence = float(result.analysis.confidence)
        return cls(
            result.nodeid,
            [float(x) for x in result.latency.samples_ms],
            metrics,
            result.analysis.bottleneck,
            confidence if math.isfinite(confidence) else 0.0,
            dict(fp),
            timestamp,
            int(result.schema_version),
            int(result.rounds),
            int(result.warmup),
            [float(x) for x in result.latency.probe_ms],
        )


@dataclass
class Baseline:
    """A loaded baseline file: the latest entry per test id, and every entry in `history`."""

    name: str
    path: Path
    history: dict[str, list[BaselineEntry]]  # oldest first
    schema_version: int = BASELINE_SCHEMA_VERSION

    @property
    def tests(self) -> dict[str, BaselineEntry]:
        return {nodeid: runs[-1] for nodeid, runs in self.history.items() if runs}

    def get(self, nodeid: str) -> BaselineEntry | None:
        runs = self.history.get(nodeid)
        return runs[-1] if runs else None


class BaselineStore:
    """The baseline folder: save a run under a name, load it back, list the names."""

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_DIR) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        return self.root / f"{validate_name(name)}.json"

    def names(self) -> list[str]:
        """The baselines in the folder (none when the folder does not exist)."""
        try:
            files = list(self.root.iterdir())
        except OSError:
            return []
        return sorted(p.stem for p in files if p.suffix == ".json" and _NAME.fullmatch(p.stem) and p.is_file())

    def for_run(self, compare: str | None, save: str | None) -> tuple[Baseline | None, Baseline | None]:
        """The baseline a run compares with, and the existing one its save will append to: loaded as the session
        starts, so that a corrupt or foreign file, or a folder that is a file, stops the run before its tests, not
        after (BaselineError)."""
        self.check_folder()
        compared = self.load(compare) if compare is not None else None
        return compared, self.load(save) if save is not None and self.path(save).exists() else None

    def check_folder(self) -> None:
        """The folder, or where it would be made, is no file: else BaselineError naming the file (a baseline's path
        under it read "Not a directory", and a save at the session's end "File exists")."""
        for p in (self.root, *self.root.parents):
            if not p.exists():
                continue
            if not p.is_dir():
                which = "is a file" if p == self.root else f"cannot be made: {str(p)!r} is a file"
                raise BaselineError(
                    f"The baseline folder {str(self.root)!r} {which}, not a folder; baselines are kept in it as one "
                    "NAME.json file each. Move or rename that file, or choose another folder with "
                    "--inferscope-baseline-dir=DIR."
                )
            return

    def save_run(self, name: str, results: list[TestResult], environment: Mapping[str, Any]) -> str:
        """`save`, and the summary's line saying where, and how many tests (BaselineError as from `save`)."""
        path = self.save(name, results, environment)
        saved = sum(1 for r in results if r.outcome == "passed" and not r.partial_reason and r.latency.samples_ms)
        return f"inferscope: saved baseline {name!r} ({fmt_count(saved, 'test')}) to {path}"

    def save(self, name: str, results: Iterable[TestResult], environment: Mapping[str, Any]) -> Path:
        """Append one entry per test that completed its rounds to `<name>.json`; return the file's path.

        Tests whose body failed or that measured no round are not recorded (a partial run is no
        baseline); if none is left, nothing is written and BaselineError says why.
        """
        path = self.path(name)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        results = list(results)
        entries = [
            # Each test's own environment: under xdist the controller saving it imported no torch and pinned no GPU.
            BaselineEntry.from_result(r, fingerprint(r.environment or environment), stamp)
            for r in results
            if r.outcome == "passed"
            and not r.partial_reason
            and r.latency.samples_ms
            and all(math.isfinite(x) for x in r.latency.samples_ms)
        ]
        if not entries:
            raise BaselineError(
                f"Nothing was saved to baseline {name!r} ({path}): {_none_completed(len(results))} (a test whose body "
                "failed is not recorded). The file was not touched."
            )
        self.check_folder()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BaselineError(
                f"The baseline folder {str(self.root)!r} cannot be created: {e.strerror or e}. Check that its "
                "parents are folders this user can write to, or choose another with --inferscope-baseline-dir."
            ) from e
        # The lock is on the folder the file really is in: baselines of two checkouts linked to one shared file
        # (each `main.json` a symlink in its own folder) take the same lock, and neither save drops the other's entry.
        with _locked(Path(os.path.realpath(path)).parent):
            empty: dict[str, Any] = {
                "format": FORMAT,
                "schema_version": BASELINE_SCHEMA_VERSION,
                "name": name,
                "tests": {},
            }
            doc = self._read(path, name, missing_ok=True) or empty
            for entry in entries:
                doc["tests"].setdefault(entry.nodeid, []).append(entry.to_dict())
            text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
            try:
                atomic_write_text(path, text, durable=True)
            except OSError as e:
                raise BaselineError(
                    f"Baseline {name!r} could not be written to {str(path)!r}: {e.strerror or e}. The previous "
                    "file, if any, was left as it was; check free space and write permission on the folder."
                ) from e
        return path

    def load(self, name: str) -> Baseline:
        """Read `<name>.json`; a missing, unreadable, corrupt, foreign or newer file raises BaselineError."""
        path = self.path(name)
        doc = self._read(path, name, missing_ok=False)
        assert doc is not None  # missing_ok=False raises instead
        history = {nodeid: [BaselineEntry.from_dict(nodeid, e) for e in runs] for nodeid, runs in doc["tests"].items()}
        return Baseline(name, path, history, int(doc["schema_version"]))

    def _read(self, path: Path, name: str, *, missing_ok: bool) -> dict[str, Any] | None:
        """The validated contents of a baseline file; never modifies it."""
        file = f"Baseline file {str(path)!r}"
        left = (
            "The file was left untouched; restore it from version control, or move it aside and record the "
            f"baseline again with --inferscope-save-baseline={name}."
        )
        try:
            doc = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            if missing_ok:
                return None
            raise BaselineError(self._missing(name, path)) from None
        except OSError as e:
            raise BaselineError(f"{file} cannot be read: {e.strerror or e}. Check that it is a readable file.") from e
        except UnicodeDecodeError as e:
            raise BaselineError(f"{file} is corrupt: it is not UTF-8 text (byte {e.start}). {left}") from e
        except json.JSONDecodeError as e:
            raise BaselineError(
                f"{file} is corrupt: not valid JSON at line {e.lineno}, column {e.colno} ({e.msg}); it may have "
                f"been cut short or edited by hand. {left}"
            ) from e
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise BaselineError(
                f'{file} is JSON but not a pytest-inferscope baseline (it has no "format": "{FORMAT}" marker), '
                "perhaps another tool's file. It was left untouched; use another baseline name, or another "
                "folder with --inferscope-baseline-dir."
            )
        version = doc.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise BaselineError(
                f"{file} has an unknown schema version {version!r} (this pytest-inferscope reads versions 1 to "
                f"{BASELINE_SCHEMA_VERSION}). {left}"
            )
        if version > BASELINE_SCHEMA_VERSION:
            raise BaselineError(
                f"{file} was written by a newer pytest-inferscope (baseline schema version {version}; this version "
                f"reads up to {BASELINE_SCHEMA_VERSION}). Upgrade pytest-inferscope to compare against it or add "
                "to it; the file was left untouched."
            )
        problem = _structure_problem(doc.get("tests"))
        if problem:
            raise BaselineError(f"{file} is corrupt: {problem}. {left}")
        return doc

    def _missing(self, name: str, path: Path) -> str:
        folder, names = str(self.root), self.names()
        if not self.root.is_dir():
            where = f"the baseline folder {folder!r} does not exist"
        elif names:
            where = f"the baselines in {folder!r} are: {', '.join(names)}"
        else:
            where = f"the baseline folder {folder!r} has no baselines"
        return (
            f"No baseline named {name!r} ({str(path)!r} does not exist); {where}. Record one with "
            f"--inferscope-save-baseline={name}, compare against an existing name, or check --inferscope-baseline-dir."
        )


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Lock `folder` (flock on its descriptor: no lock file) so concurrent saves to a file in it lose no entries.

    Where locking is unavailable the save goes ahead unlocked."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


#: Above any round's latency (11.6 days): a saved sample beyond it was edited by hand, and overflows the statistics.
MAX_SAMPLE_MS = 1e9


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: Optional entry keys and whether a value is acceptable (samples_ms is required).
_ENTRY_CHECKS: dict[str, tuple[str, Any]] = {
    "probe_ms": ("a list of finite numbers", lambda v: isinstance(v, list) and all(map(_is_number, v))),
    "metrics": ("an object of finite numbers", lambda v: isinstance(v, dict) and all(map(_is_number, v.values()))),
    "fingerprint": ("an object", lambda v: isinstance(v, dict)),
    **dict.fromkeys(("bottleneck", "timestamp"), ("a string", lambda v: isinstance(v, str))),
    "confidence": ("a number", _is_number),
    **dict.fromkeys(("schema_version", "rounds", "warmup"), ("an integer", _is_int)),
}


def _structure_problem(tests: Any) -> str:
    """What is malformed in a baseline's "tests" object, or '' when it is sound."""
    if not isinstance(tests, dict):
        return '"tests" is missing or not an object'
    for nodeid, runs in tests.items():
        if not isinstance(runs, list):
            return f"the entries of {nodeid!r} are not a list"
        for i, e in enumerate(runs):
            where = f"entry {i} of {nodeid!r}"
            if not isinstance(e, dict):
                return f"{where} is not an object"
            samples = e.get("samples_ms")
            if not isinstance(samples, list) or not all(map(_is_number, samples)):
                return f"{where}: samples_ms is not a list of finite numbers"
            if not all(0 < x < MAX_SAMPLE_MS for x in samples):  # (1e308 overflowed the comparison's statistics)
                return f"{where}: samples_ms holds a latency out of range (each is a round's ms, over 0 and under 1e9)"
            for key, (want, ok) in _ENTRY_CHECKS.items():
                if key in e and not ok(e[key]):
                    return f"{where}: {key} is not {want}"
    return ""
