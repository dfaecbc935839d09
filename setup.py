"""Builds the optional native CUPTI collector, `pytest_inferscope._cupti`, the replay's walk in C,
`pytest_inferscope._replay`, and the stack sampler's clock, `pytest_inferscope._tick`; metadata lives in pyproject.toml.

The CUPTI extension needs only the CUPTI headers at build time (libcupti is loaded at run time, never
linked). Without them, or when the compiler fails, the install goes on without the extension and
inferscope falls back to the cupti-python backend or to CPU-only collection. The replay's walk needs a C
compiler alone; without it the analysis walks in Python. So does the sampler's clock (without it,
--inferscope-sampler=signal falls back to the sampler thread). Set INFERSCOPE_FORCE_NATIVE_BUILD=1 on machines
that must have all three: any of those becomes an error.

    python3 setup.py build_ext --inplace    # development build, next to the sources
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

FORCE_ENV = "INFERSCOPE_FORCE_NATIVE_BUILD"
REPLAY = "pytest_inferscope._replay"
TICK = "pytest_inferscope._tick"
#: The extensions of plain C (no CUDA: a C compiler alone): what each is, and what runs where it is not built.
PLAIN_C = {
    REPLAY: ("the native replay walk", "the analysis replays in Python"),
    TICK: ("the native sampler clock", "--inferscope-sampler=signal falls back to the sampler thread"),
}
CUPTI_MAJOR = "13"  # nvidia/cu13: where torch's CUDA 13 wheels put the toolkit's headers and libraries


def _forced() -> bool:
    return os.environ.get(FORCE_ENV, "") == "1"


def _site_dirs() -> list[str]:
    dirs = [p for p in sys.path if p]
    if hasattr(site, "getsitepackages"):  # some virtualenv versions ship a site module without it
        dirs += [*site.getsitepackages(), site.getusersitepackages()]
    dirs += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs))


def _include_candidates(wheel_subdirs: tuple[str, ...]) -> list[str]:
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    dirs = [os.path.join(r, "include") for r in roots if r]
    dirs += [os.path.join(s, "nvidia", sub, "include") for s in _site_dirs() for sub in wheel_subdirs]
    return dirs


def find_cuda_includes() -> tuple[list[str], str | None]:
    """Include folders holding cupti.h and cuda.h (which cupti.h includes), or the reason they are missing."""
    found: list[str] = []
    for header, subdirs in (
        ("cupti.h", ("cuda_cupti", f"cu{CUPTI_MAJOR}")),
        ("cuda.h", ("cuda_runtime", "cuda_nvcc", f"cu{CUPTI_MAJOR}")),
    ):
        candidates = _include_candidates(subdirs)
        hit = next((d for d in candidates if os.path.isfile(os.path.join(d, header))), None)
        if hit is None:
            return [], f"{header} not found (looked in $CUDA_HOME/include, {', '.join(candidates[1:4])}, ...)"
        if hit not in found:
            found.append(hit)
    return found, None


class OptionalBuildExt(build_ext):
    """build_ext that warns and carries on when the native extension cannot be built, unless forced."""

    def run(self) -> None:
        self._skipped: set[str] = set()
        try:
            super().run()
        except Exception as exc:  # a missing compiler fails before build_extension
            self._give_up(None, f"build failed: {exc}")

    def build_extension(self, ext: Extension) -> None:
        if ext.name in PLAIN_C:
            try:
                super().build_extension(ext)
            except Exception as exc:
                self._give_up(ext, f"build failed: {exc}")
            return
        if not sys.platform.startswith("linux"):
            self._give_up(ext, f"CUPTI collection is Linux-only (this is {sys.platform})")
            return
        includes, missing = find_cuda_includes()
        if missing is not None:
            self._give_up(ext, f"{missing}; set CUDA_HOME to a CUDA toolkit, or install nvidia-cuda-cupti")
            return
        ext.include_dirs = [*includes, *ext.include_dirs]
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._give_up(ext, f"build failed: {exc}")

    # What was skipped must not be copied (--inplace, editable installs) or listed in the wheel.
    def _built(self) -> list[Extension]:
        skipped: set[str] = getattr(self, "_skipped", set())
        return [ext for ext in self.extensions if ext.name not in skipped]

    def copy_extensions_to_source(self) -> None:
        self.extensions = self._built()
        super().copy_extensions_to_source()

    def get_outputs(self) -> list[str]:
        self.extensions = self._built()
        return list(super().get_outputs())

    def get_output_mapping(self) -> dict[str, str]:
        self.extensions = self._built()
        return dict(super().get_output_mapping())

    def _give_up(self, ext: Extension | None, reason: str) -> None:
        cupti = ("the native CUPTI extension", "GPU collection will use cupti-python if installed")
        what, then = PLAIN_C.get(ext.name, cupti) if ext is not None else ("the native extensions", cupti[1])
        message = f"pytest-inferscope: skipping {what}: {reason.rstrip('.')}"  # (a CalledProcessError's ends in one)
        if _forced():
            raise SystemExit(f"{message} ({FORCE_ENV}=1 makes this an error)")
        if ext is None:
            self._skipped.update(e.name for e in self.extensions)
        else:
            self._skipped.add(ext.name)
        print(f"WARNING: {message}. {then[0].upper()}{then[1:]}.", file=sys.stderr)


setup(
    ext_modules=[
        Extension(
            "pytest_inferscope._cupti",
            sources=["native/_cupti.c"],
            libraries=["dl", "pthread"],  # libcupti itself is dlopen'ed at run time
            extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden"],
            py_limited_api=True,  # Py_LIMITED_API 3.11 in the source: one .abi3.so for every CPython
        ),
        Extension(
            REPLAY,
            sources=["native/_replay.c"],
            extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden"],
            py_limited_api=True,
        ),
        Extension(
            TICK,
            sources=["native/_tick.c"],
            libraries=["pthread"],
            extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden"],
            py_limited_api=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
    # The wheel says what its extensions are: for the stable ABI of CPython 3.11 and later (cp311-abi3), not for the
    # one CPython that built it, so one wheel installs on every supported CPython.
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
