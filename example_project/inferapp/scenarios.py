"""Labelled bottleneck scenarios: one per class, each with a fixed variant that applies the analyzer's top suggestion.

Every scenario is a small, recognisable inference pattern whose bottleneck is clear by
construction. `setup(device)` builds what the body needs (outside the measured rounds);
`slow(state)` is the pattern, `fixed(state)` the same work with the top suggestion applied.
The marked tests in `tests/test_scenarios.py` and `tests/gpu/record_scenarios.py` (which
records them on a GPU machine into `tests/data/<scenario>/`) both use this table.

- cpu_bound: pure-Python tokenisation of every request, then the forward; fixed: token ids
  cached per text.
- gpu_bound: a 128 x 512 fp32 forward through the `small` model; fixed: bf16 autocast.
- transfer_bound: 4 pageable 32 MiB host-to-device copies per call, each then computed on;
  fixed: pinned batches, copied with non_blocking=True on a side stream while the previous
  one computes.
- launch_bound: a 64-step batch-1 greedy decode loop of tiny kernels; fixed: the loop
  captured once in a CUDA graph and replayed.
- sync_bound: 200 refinement steps, each reading a norm back with .item(); fixed: the norms
  stay on the device, read once at the end.
- memory_bound: 32 MiB of new features kept from every call (host memory grows); fixed: one
  preallocated buffer, reused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .batching import pad_batch
from .data import make_requests
from .model import build_model, small, tiny
from .tokenizer import Tokenizer

State = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    """One labelled scenario: what it is, how to build it, the slow body and the fixed one."""

    name: str
    expected: str
    gpu: bool  # needs CUDA (the CPU ones also run on CUDA machines)
    slow_doc: str
    fix_doc: str
    setup: Callable[[torch.device], State]
    slow: Callable[[State], object]
    fixed: Callable[[State], object]
    rounds: int = 10
    warmup: int = 3


# -- cpu_bound: Python tokenisation on the critical path ------------------------------------


def _cpu_setup(device: torch.device) -> State:
    tok = Tokenizer()
    on_gpu = device.type == "cuda"
    # On a GPU the forward is a few ms of real GPU work; on a CPU it stays small, so CI stays fast.
    model = build_model((small if on_gpu else tiny)(tok.vocab_size)).to(device).eval()
    return {
        "tok": tok,
        "model": model,
        "texts": make_requests(128 if on_gpu else 32, seed=0),
        "rows": 128 if on_gpu else 8,
        "device": device,
        "cached": functools.lru_cache(maxsize=None)(functools.partial(tok.encode, max_len=64)),
    }


def _cpu_forward(st: State, ids: list[list[int]]) -> torch.Tensor:
    inputs = pad_batch(ids[: st["rows"]], pad_id=st["tok"].pad_id, max_len=64, pad_to_max_len=True)
    with torch.inference_mode():
        return st["model"](inputs["input_ids"].to(st["device"]), inputs["attention_mask"].to(st["device"]))


def cpu_slow(st: State) -> torch.Tensor:
    """Every call tokenises every request in pure Python before the forward."""
    return _cpu_forward(st, st["tok"].encode_batch(st["texts"], max_len=64))


def cpu_fixed(st: State) -> torch.Tensor:
    """Token ids cached per text (a repeated request is not tokenised again)."""
    return _cpu_forward(st, [st["cached"](t) for t in st["texts"]])


# -- gpu_bound: a large batch forward ---------------------------------------------------------


def _gpu_setup(device: torch.device) -> State:
    tok = Tokenizer()
    model = build_model(small(tok.vocab_size)).to(device).eval()
    gen = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(4, model.config.vocab_size, (128, 512), device=device, generator=gen)
    return {"model": model, "ids": ids}


def gpu_slow(st: State) -> torch.Tensor:
    """128 x 512 tokens through 6 layers of width 384 in fp32."""
    with torch.inference_mode():
        return st["model"](st["ids"])


def gpu_fixed(st: State) -> torch.Tensor:
    """The same forward under bf16 autocast (tensor cores)."""
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        return st["model"](st["ids"])


# -- transfer_bound: pageable host-to-device copies every step ---------------------------------

_STEPS = 4


def _transfer_setup(device: torch.device) -> State:
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(2048, 4096, generator=gen) for _ in range(_STEPS)]  # 32 MiB each, pageable
    w = torch.randn(4096, 4096, generator=gen).to(device) / 64.0
    return {
        "pageable": batches,
        "pinned": [b.pin_memory() for b in batches],
        "w": w,
        "stream": torch.cuda.Stream(device=device),
        "device": device,
    }


def transfer_slow(st: State) -> list[torch.Tensor]:
    """Each step uploads a pageable 32 MiB batch (staged, synchronous), then computes on it."""
    return [torch.tanh(b.to(st["device"]) @ st["w"]).sum(0) for b in st["pageable"]]


def transfer_fixed(st: State) -> list[torch.Tensor]:
    """Pinned batches, copied with non_blocking=True on a side stream while the previous batch computes."""
    compute, copy = torch.cuda.current_stream(st["device"]), st["stream"]
    with torch.cuda.stream(copy):
        nxt = st["pinned"][0].to(st["device"], non_blocking=True)
    out = []
    for i in range(_STEPS):
        compute.wait_stream(copy)
        x = nxt
        x.record_stream(compute)  # the caching allocator must not reuse x while compute still reads it
        if i + 1 < _STEPS:
            with torch.cuda.stream(copy):
                nxt = st["pinned"][i + 1].to(st["device"], non_blocking=True)
        out.append(torch.tanh(x @ st["w"]).sum(0))
    return out


# -- launch_bound: a batch-1 decode loop of tiny kernels ---------------------------------------

_DECODE_STEPS, _VOCAB, _HIDDEN = 64, 1000, 64


class TinyDecoder(nn.Module):
    """A recurrent cell over token embeddings: a handful of tiny kernels per generated token."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(_VOCAB, _HIDDEN)
        self.ih = nn.Linear(_HIDDEN, _HIDDEN)
        self.hh = nn.Linear(_HIDDEN, _HIDDEN)
        self.head = nn.Linear(_HIDDEN, _VOCAB)

    def step(self, tok: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.ih(self.embed(tok)) + self.hh(h))
        return self.head(h).argmax(-1), h  # the next token stays on the device: no sync

    def decode(self, tok: torch.Tensor, h: torch.Tensor, out: torch.Tensor) -> None:
        for i in range(_DECODE_STEPS):
            tok, h = self.step(tok, h)
            out[:, i] = tok


def _launch_setup(device: torch.device) -> State:
    model = TinyDecoder().to(device).eval()
    tok = torch.zeros(1, dtype=torch.long, device=device)
    h = torch.zeros(1, _HIDDEN, device=device)
    out = torch.zeros(1, _DECODE_STEPS, dtype=torch.long, device=device)
    st: State = {"model": model, "tok": tok, "h": h, "out": out}
    with torch.inference_mode():
        side = torch.cuda.Stream(device=device)  # warm up on a side stream before capture, as torch asks
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                model.decode(tok, h, out)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model.decode(tok, h, out)
    st["graph"] = graph
    return st


def launch_slow(st: State) -> torch.Tensor:
    """64 greedy decode steps of batch 1, launched one tiny kernel at a time."""
    with torch.inference_mode():
        st["model"].decode(st["tok"], st["h"], st["out"])
    return st["out"]


def launch_fixed(st: State) -> torch.Tensor:
    """The 64 steps captured once as a CUDA graph, replayed with one launch."""
    st["graph"].replay()
    return st["out"]


# -- sync_bound: .item() every step -------------------------------------------------------------

_REFINE_STEPS = 200


def _sync_setup(device: torch.device) -> State:
    gen = torch.Generator(device=device).manual_seed(0)
    return {
        "w": torch.randn(1024, 1024, device=device, generator=gen) / 32.0,
        "h0": torch.randn(1024, 1024, device=device, generator=gen),
    }


def sync_slow(st: State) -> list[float]:
    """Each refinement step reads its norm back (`.item()`): the host waits, then the GPU waits."""
    h, norms = st["h0"], []
    with torch.inference_mode():
        for _ in range(_REFINE_STEPS):
            h = torch.tanh(h @ st["w"])
            norms.append(h.norm().item())
    return norms


def sync_fixed(st: State) -> list[float]:
    """The norms stay on the device; one copy reads them all at the end."""
    h, norms = st["h0"], []
    with torch.inference_mode():
        for _ in range(_REFINE_STEPS):
            h = torch.tanh(h @ st["w"])
            norms.append(h.norm())
        return torch.stack(norms).cpu().tolist()


# -- memory_bound: host memory growth ----------------------------------------------------------

_FEATURE_FLOATS = 8 * 1024 * 1024  # 32 MiB of float32
_PAGE_FLOATS = 1024  # one float32 per 4 KiB page


def _memory_setup(device: torch.device) -> State:
    return {"history": [], "buffer": np.zeros(_FEATURE_FLOATS, dtype=np.float32)}


def memory_slow(st: State) -> int:
    """Every call keeps a new 32 MiB feature array (a cache that is never trimmed): new pages fault in."""
    feats = np.zeros(_FEATURE_FLOATS, dtype=np.float32)
    feats[::_PAGE_FLOATS] = 1.0
    st["history"].append(feats)
    return len(st["history"])


def memory_fixed(st: State) -> int:
    """One preallocated buffer, reused every call: no growth, no new pages."""
    st["buffer"][::_PAGE_FLOATS] = 1.0
    return 1


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "cpu_bound", "cpu_bound", False, cpu_slow.__doc__ or "", cpu_fixed.__doc__ or "",
            _cpu_setup, cpu_slow, cpu_fixed, rounds=5, warmup=1,
        ),
        Scenario("gpu_bound", "gpu_bound", True, gpu_slow.__doc__ or "", gpu_fixed.__doc__ or "",
                 _gpu_setup, gpu_slow, gpu_fixed),
        Scenario("transfer_bound", "transfer_bound", True, transfer_slow.__doc__ or "",
                 transfer_fixed.__doc__ or "", _transfer_setup, transfer_slow, transfer_fixed),
        Scenario("launch_bound", "launch_bound", True, launch_slow.__doc__ or "", launch_fixed.__doc__ or "",
                 _launch_setup, launch_slow, launch_fixed),
        Scenario("sync_bound", "sync_bound", True, sync_slow.__doc__ or "", sync_fixed.__doc__ or "",
                 _sync_setup, sync_slow, sync_fixed, rounds=5, warmup=1),
        Scenario(
            "memory_bound", "memory_bound", False, memory_slow.__doc__ or "", memory_fixed.__doc__ or "",
            _memory_setup, memory_slow, memory_fixed, rounds=8, warmup=1,
        ),
    )
}  # fmt: skip
