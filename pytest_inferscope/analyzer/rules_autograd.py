"""The autograd rule: the body ran its model with autograd recording, for a backward that never came.

The collection counts the autograd graph nodes the test thread made in the measured rounds (collectors/autograd.py,
`meta["autograd"]`). Any at all, and no backward sampled in the body (a training step's, or torch.func's transforms,
make nodes for the backward they run), is the finding: grad mode was on and something the ops used required grad. Its
time is in native code, seen by no stack sample and no edge of the round's dependency graph, so no saving is simulated
or claimed (the suggestion's saving is 0, which the reports write as not estimated); the order of magnitude measured on
the dev VM is in the rationale.
"""

from __future__ import annotations

import re

from ..results import Finding, Suggestion
from .context import Context

#: A sampled frame of a backward: torch's autograd engine, `Tensor.backward`, `torch.autograd.grad`, torch.func.
_BACKWARD = re.compile(
    r"(?:_engine_run_backward|__init__:(?:backward|grad)) \(.*torch[\\/]autograd[\\/]"
    r"|:Tensor\.backward \(.*torch[\\/]_tensor\.py"
    r"|\(.*torch[\\/]_functorch[\\/]"
)

#: What autograd left on cost small models' calls on the 2-core dev VM (benchmarks/bench_autograd.py, 2026-11-30).
MEASURED = (
    "for its order, a 4-layer MLP's call took 7-27% longer with autograd on than under inference_mode, a small conv "
    "net's 3-9% (the 2-core dev VM, 2026-11-30, benchmarks/bench_autograd.py)"
)

ACTION = (
    "Call the model under torch.inference_mode() (or torch.no_grad()), or take the grad off its parameters "
    "(model.requires_grad_(False)): autograd then records no graph and saves no tensors"
)


def backward_sampled(ctx: Context) -> bool:
    """Whether any sample of the rounds was in a backward (torch's autograd engine or torch.func)."""
    return any(_BACKWARD.search(h.function) for h in ctx.cpu.hotspots)


def autograd_recording(ctx: Context) -> list[Finding]:
    """Autograd made graph nodes in the measured rounds, and no backward was sampled there."""
    a = ctx.timeline.meta.get("autograd")
    if not isinstance(a, dict) or not a.get("nodes") or not a.get("rounds"):
        return []  # not counted (torch not imported, a torch without the counter), or autograd recorded nothing
    if backward_sampled(ctx):
        return []  # a training step, or torch.func: the nodes are for a backward that ran
    per_call = a["nodes"] / a["rounds"]
    sampled = "no sample was in a backward" if ctx.cpu.sample_weights else "the stack was not sampled"
    return [
        Finding(
            rule="autograd_recording",
            title="Autograd records the inference: grad mode on, parameters requiring grad",
            summary=f"Autograd recorded the body's ops: {per_call:.0f} graph nodes a call in the measured rounds, each "
            "keeping the tensors its backward would need alive as long as the output is, and "
            f"{sampled} (a training step's would be). Neither shows in the stack samples (native code), and the "
            "saving is not estimated.",
            cause=None,
            share=0.0,  # its time is not measured apart (the module's docstring)
            share_measured=False,
            confidence=0.9 if ctx.cpu.sample_weights else 0.6,  # counted by autograd; a backward told apart by samples
            evidence={
                "autograd graph nodes per call": round(per_call, 1),
                "measured rounds counted": int(a["rounds"]),
                "backward sampled": f"no ({sampled})",
            },
            suggestions=[
                Suggestion(
                    action=ACTION,
                    rationale=f"autograd made {per_call:.0f} graph nodes a call for a backward that never ran (if the "
                    "test measures a training step, this is its forward's graph: ignore it); the saving is not "
                    f"simulated (its work is native code, no edge of the round's graph): {MEASURED}",
                    saving_ms=0.0,
                    rule="autograd_recording",
                )
            ],
        )
    ]
