"""Record the labelled scenarios with torch.profiler (Kineto), for `inferscope analyze` to read back.

Run in a process of its own (calibrate_whatif.py does): CUPTI allows one activity client per process, so
torch.profiler must not share a process with the plugin's collector. Each scenario's slow variant runs its
warm-up and measured rounds as `ProfilerStep`s (CPU and CUDA activities, a device synchronize ending each
step as the plugin's rounds do), and the trace is written as OUT/<scenario>.json.gz, the layout
`tests/data/kineto/` keeps.

    python3 tests/gpu/kineto_scenarios.py --out DIR [--cpu-smoke]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "example_project"))


def record(out: Path, smoke: bool) -> list[Path]:
    import torch
    from inferapp.scenarios import SCENARIOS
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda" if cuda else "cpu")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, s in SCENARIOS.items():
        if s.gpu and not cuda:
            continue
        rounds, warmup = (2, 1) if smoke else (s.rounds, s.warmup)
        state = s.setup(device)
        path = out / f"{name}.json"
        with profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=warmup, active=rounds, repeat=1),
            on_trace_ready=lambda p, path=path: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(warmup + rounds):
                s.slow(state)
                if cuda:
                    torch.cuda.synchronize()
                prof.step()
        with path.open("rb") as f, gzip.open(f"{path}.gz", "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
        path.unlink()
        written.append(Path(f"{path}.gz"))
        del state
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    for p in record(args.out, args.cpu_smoke):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
