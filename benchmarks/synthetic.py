"""Synthetic raw traces of a GPU inference test, for benchmarking the post-processing stages.

`make_raw_trace(n_events, seed)` returns a `RawTrace` shaped like what the collectors leave
for the merger after a profiled test with 20 rounds (3 warm-up) of a BERT-style pipeline:

* host side (Domain.HOST, host ns around 1e12, the test thread's tid): one TEST span,
  20 ROUND spans, per round the user scopes preprocess > tokenize, forward and
  postprocess, a `batch_ready` MARK, two forwards' worth of nested MODULE spans
  (`encoder.layers.3.attn.out_proj`, ...), contiguous CPU SAMPLE spans of about 1 ms whose
  folded stacks (a pool of about 200) follow the phase they fall in, and MEMORY samples
  (every 10th CPU sample, and at each round boundary);
* GPU work, most of the events: each RUNTIME record (the launch call on the test thread:
  Domain.DEVICE, device -1, stream -1, correlation id k) is followed by one KERNEL, MEMCPY
  or MEMSET record on device 0 with the same correlation id, on 2-4 streams. A record
  starts 5-20 us after its call unless its stream is still busy (then when the stream
  frees up); each stream runs one record at a time. Kernel names come from a pool of
  about 300, each with its own typical duration; copies carry bytes and pageable/pinned
  flags, and the device-to-host copies and the end of each round wait for the GPU.

Device-domain timestamps are host time plus a constant offset (rate exactly 1), and
`clock_pairs` holds two (host_ns, device_ns) readings, at the start and the end, that say
so. The event count is exactly `n_events`. Everything is vectorised: 1,000,000 events
take well under a second.

Run `python benchmarks/synthetic.py [n_events]` to build a trace, print its composition
and time it, then merge it with `pytest_inferscope.merger.merge` and check causality.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_inferscope.events import (
    EVENT_DTYPE,
    CopyKind,
    Domain,
    Kind,
    MemoryFlag,
    MemoryKind,
    RawTrace,
    StringTable,
    copy_flags,
)
from pytest_inferscope.rounds import RoundKind, kind_flags

ROUNDS = 20
WARMUP_ROUNDS = 3
FORWARDS_PER_ROUND = 2
SCOPES_PER_ROUND = 4  # preprocess, tokenize (inside preprocess), forward, postprocess
MIN_EVENTS = 2_000

HOST_T0_NS = 1_000_000_000_000  # the host clock (CLOCK_MONOTONIC) about 17 minutes after boot
#: Device (CUPTI) clock = host clock + this, exactly; CUPTI timestamps are large, epoch-like values.
DEVICE_OFFSET_NS = 1_763_000_000_000_000_000 - HOST_T0_NS
TEST_TID = 41_873
DEVICE = 0
US = 1_000
MS = 1_000_000

# Mean host cost of the parts of a round, used to size the trace before it is generated.
_TOKENIZE_NS = 6 * MS
_PAD_NS = 300 * US
_POST_CPU_NS = 1_500 * US
_ENTER_NS, _EXIT_NS = 10 * US, 3500  # module hook + Python call overhead
_OP_NS = 6_000 + 4_500  # eager PyTorch between two launches + the launch call itself


# -- name pools ------------------------------------------------------------------------------


def _kernel_pools() -> dict[str, list[tuple[str, float]]]:
    """About 300 kernel names, grouped by the module part that launches them, each with a typical duration (ns)."""
    nat = "at::native::"
    anon = f"{nat}(anonymous namespace)::"
    gemm: list[tuple[str, float]] = []
    for dt in ("f32f32_tf32f32_f32", "bf16bf16_bf16f32_f32", "f16f16_f16f32_f32"):
        for tile in ("64x64x32", "64x128x32", "128x64x32", "128x128x32", "128x256x64", "256x128x64", "64x256x64"):
            for layout in ("nn", "tn", "nt", "tt"):
                gemm.append(
                    (
                        f"sm90_xmma_gemm_{dt}_{layout}_n_tilesize{tile}_warpgroupsize1x1x1"
                        "_execute_segment_k_off_kernel__5x_cublas",
                        6_500,
                    )
                )
    for m, n in ((64, 64), (128, 64), (128, 128), (256, 64), (256, 128)):
        for layout in ("nn", "tn", "nt"):
            name = f"void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_{m}x{n}_16x4_{layout}_align4>(Params)"
            gemm.append((name, 5_500))
    for m, n in ((32, 32), (64, 32), (128, 32), (128, 64)):
        for layout in ("nn", "nt", "tn"):
            gemm.append((f"ampere_sgemm_{m}x{n}_sliced1x4_{layout}", 4_500))
    for tile in (16, 32, 64):
        for k in ("float", "__nv_bfloat16", "__half"):
            args = f"int, float, {k}, float, {k}, false, float, {k}, float, true, false, false"
            gemm.append((f"void cublasLt::splitKreduce_kernel<32, {tile}, {args}>(cublasSplitKParams<float>)", 2_400))
    for dims in (1, 2, 3, 4):
        for vec in (2, 4):
            name = f"void {anon}CatArrayBatchedCopy<{anon}OpaqueType<{vec}>, unsigned int, {dims}, 128, 1>(...)"
            gemm.append((name, 2_000))

    attn: list[tuple[str, float]] = []
    for dt in ("f32", "bf16", "f16"):
        for tile in ("32x128", "64x64", "64x128", "128x64"):
            name = f"fmha_cutlassF_{dt}_aligned_{tile}_rf_sm80(PyTorchMemEffAttention::AttentionKernel::Params)"
            attn.append((name, 8_000))
    for hd in (32, 64, 128):
        for bm, bn in ((64, 64), (128, 64), (128, 128)):
            traits = f"Flash_fwd_kernel_traits<{hd}, {bm}, {bn}, 4, false, false, cutlass::bfloat16_t>"
            attn.append((f"void pytorch_flash::flash_fwd_kernel<{traits} >(Flash_fwd_params)", 7_000))
    for log2 in range(4, 11):
        for masked in ("false", "true"):
            name = (
                f"void (anonymous namespace)::softmax_warp_forward<float, float, float, {log2}, false, {masked}>(...)"
            )
            attn.append((name, 2_600))
    for perm in ("0, 2, 1, 3", "0, 1, 3, 2", "1, 0, 2, 3"):
        for vec in (1, 2, 4):
            copy = f"{nat}direct_copy_kernel_cuda(at::TensorIteratorBase&)::permute<{perm}>"
            attn.append((f"void {nat}elementwise_kernel<128, {vec}, {nat}gpu_kernel_impl_nocast<{copy}> >(...)", 2_200))

    elementwise: list[tuple[str, float]] = []
    functors = (
        "CUDAFunctor_add<float>", "AddFunctor<float>", "MulFunctor<float>", "FillFunctor<float>",
        "BinaryFunctor<float, float, float, binary_internal::DivFunctor<float> >",
        "AUnaryFunctor<float, float, float, binary_internal::MulFunctor<float> >",
        "where_kernel_impl(at::TensorIterator&)::{lambda(bool, float, float)#1}",
        "masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda(float, bool)#1}",
        "tanh_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}",
        "sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}",
        "exp_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}",
        "neg_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}",
    )  # fmt: skip
    for fn in functors:
        for vec in (2, 4, 8):
            for arity in (2, 3):
                arrays = f"std::array<char*, {arity}>"
                name = f"void {nat}vectorized_elementwise_kernel<{vec}, {nat}{fn}, {arrays} >(int, {nat}{fn}, {arrays})"
                elementwise.append((name, 1_700))

    gelu = []
    for vec in (2, 4, 8):
        for k in (1, 2, 3):
            fn = f"{nat}GeluCUDAKernelImpl(at::TensorIteratorBase&, {nat}GeluType)::{{lambda()#{k}}}"
            gelu.append((f"void {nat}vectorized_elementwise_kernel<{vec}, {fn}, std::array<char*, 2> >(...)", 2_800))
    layer_norm = []
    for kern in ("vectorized_layer_norm_kernel", "LayerNormForwardCUDAKernel", "RowwiseMomentsCUDAKernel"):
        for t in ("float", "c10::BFloat16", "c10::Half"):
            layer_norm.append((f"void {anon}{kern}<{t}, float>(int, float, {t} const*, {t} const*, ...)", 2_600))
    embed = []
    for kern in ("indexSelectLargeIndex", "indexSelectSmallIndex"):
        for dims in ("1, 1", "2, 2", "-1, -1"):
            info = "cuda::detail::TensorInfo<float, unsigned int>"
            embed.append((f"void {anon}{kern}<float, long, unsigned int, {dims}, -2, true>({info}, ...)", 3_000))
    for v in range(1, 5):
        add = f"{nat}CUDAFunctor_add<float>"
        embed.append((f"void {nat}unrolled_elementwise_kernel<{add}, std::array<char*, 3>, {v} >(int, {add})", 1_900))
    post = []
    for b in (128, 256, 512):
        for v in (1, 4):
            for op in ("MaxOps<float>", "func_wrapper_t<float, sum_functor<float> >"):
                red = f"{nat}ReduceOp<float, {nat}{op}, unsigned int, float, 4, 4>"
                post.append((f"void {nat}reduce_kernel<{b}, {v}, {red} >({red})", 3_000))
    for d in (1, 2, -1):
        post.append((f"void {nat}sbtopk::gatherTopK<float, unsigned int, {d}, false>(...)", 6_000))
    for k in (2, 3):
        for n in (16, 32):
            gt = f"{nat}GTOp<float, true>"
            post.append((f"void {nat}bitonicSortKVInPlace<{k}, -1, {n}, float, long, {gt}, unsigned int>(...)", 5_000))
    for ilp in (2, 4, 8):
        epilogue = f"{anon}SoftMaxForwardEpilogue"
        post.append((f"void {anon}cunn_SoftMaxForward<{ilp}, float, float, float, {epilogue}>(...)", 3_200))
    return {
        "embed": embed,
        "ln": layer_norm,
        "attn": attn + gemm[:30],
        "linear": gemm,
        "gelu": gelu + elementwise[:12],
        "pool": elementwise + gemm[-8:],
        "cls": gemm[-12:] + elementwise[-6:],
        "post": post,
    }


def _stack_pools() -> dict[str, list[str]]:
    """About 200 folded stacks (as the CPU sampler writes them), per phase of a round."""

    def frame(module: str, qualname: str, line: int) -> str:
        return f"{module}:{qualname} (/work/example_project/{module.replace('.', '/')}.py:{line})"

    test = frame("tests.test_inference", "test_end_to_end_pipeline", 40)
    tokenize_leaves = [
        ("inferapp.tokenizer", "pre_tokenize", 66), ("inferapp.tokenizer", "normalize", 60),
        ("inferapp.tokenizer", "_is_punctuation", 53), ("inferapp.tokenizer", "Tokenizer._word_ids", 145),
        ("inferapp.tokenizer", "<genexpr>", 63),
    ]  # fmt: skip
    stacks: dict[str, list[str]] = {"tokenize": [], "preprocess": [], "forward": [], "postprocess": [], "other": []}
    base_tok = [test, frame("inferapp.pipeline", "InferencePipeline.preprocess", 78)]
    for i in range(40):
        mod, fn, line = tokenize_leaves[i % len(tokenize_leaves)]
        mid = [
            frame("inferapp.tokenizer", "Tokenizer.encode_batch", 180),
            frame("inferapp.tokenizer", "Tokenizer.encode", 166 + i // 5),
        ]
        stacks["tokenize"].append(";".join([*base_tok, *mid, frame(mod, fn, line + i // 5)]))
    for i in range(20):
        stacks["preprocess"].append(
            ";".join(
                [
                    *base_tok,
                    frame("inferapp.batching", "pad_batch", 20 + i),
                    frame("torch._tensor", "Tensor.to", 100 + i),
                ]
            )
        )
    fwd = [
        test,
        frame("inferapp.pipeline", "InferencePipeline.forward", 90),
        frame("torch.nn.modules.module", "Module._call_impl", 1750),
    ]
    parts = [
        ("inferapp.model", "EncoderBlock.forward", 98),
        ("torch.nn.modules.activation", "MultiheadAttention.forward", 1380),
        ("torch.nn.functional", "multi_head_attention_forward", 6050),
        ("torch.nn.modules.linear", "Linear.forward", 125),
        ("torch.nn.modules.normalization", "LayerNorm.forward", 217),
        ("torch.nn.modules.activation", "GELU.forward", 734),
        ("torch.nn.modules.container", "Sequential.forward", 250),
        ("torch.nn.functional", "scaled_dot_product_attention", 5400),
    ]
    for layer in range(12):
        for j, (mod, fn, line) in enumerate(parts):
            chain = [
                *fwd,
                frame("inferapp.model", "EncoderClassifier.forward", 125),
                frame("inferapp.model", "Encoder.forward", 113),
            ]
            stacks["forward"].append(
                ";".join(
                    [*chain, frame(mod, fn, line + layer % 3), frame("torch.cuda", f"_lazy_call_{j}", 300 + layer)]
                )
            )
    for i in range(20):
        leaf = ("Tensor.softmax", "Tensor.topk", "Tensor.cpu", "Tensor.tolist", "Prediction.__init__")[i % 5]
        stacks["postprocess"].append(
            ";".join(
                [
                    test,
                    frame("inferapp.pipeline", "InferencePipeline.postprocess", 96),
                    frame("torch._tensor", leaf, 40 + i),
                ]
            )
        )
    stacks["other"] = [
        "<harness>",
        *(f"{test};{frame('pytest_inferscope.api', 'Round.__exit__', 60 + i)}" for i in range(3)),
    ]
    return stacks


# -- the template of one forward ---------------------------------------------------------------

_ENTER, _EXIT, _OP = 0, 1, 2


@dataclass
class _Forward:
    """The ordered host items of one model forward: module enters/exits and launches."""

    item: np.ndarray  # _ENTER / _EXIT / _OP
    module: np.ndarray  # index into module_names (enter/exit), -1 for ops
    op_kind: np.ndarray  # Kind of the GPU record (ops), 0 otherwise
    op_name: np.ndarray  # index into the kernel list (ops), -1 otherwise
    module_names: list[str]


def _forward_template(
    n_layers: int,
    n_ops: int,
    rng: np.random.Generator,
    pools: dict[str, list[tuple[str, float]]],
    offsets: dict[str, int],
) -> _Forward:
    """Build one forward's module tree and spread `n_ops` GPU operations over its leaves by weight."""
    # (depth-first) ("enter", name) / ("exit", name) / ("ops", pool, weight)
    tree: list[tuple[str, str, float]] = [
        ("enter", "model", 0),
        ("enter", "embed", 0),
        ("ops", "embed", 3),
        ("exit", "embed", 0),
    ]
    tree.append(("enter", "encoder", 0))
    for i in range(n_layers):
        p = f"encoder.layers.{i}"
        tree += [
            ("enter", p, 0),
            ("enter", f"{p}.ln_attn", 0), ("ops", "ln", 1), ("exit", f"{p}.ln_attn", 0),
            ("enter", f"{p}.attn", 0), ("ops", "attn", 6),
            ("enter", f"{p}.attn.out_proj", 0), ("ops", "linear", 1.5), ("exit", f"{p}.attn.out_proj", 0),
            ("exit", f"{p}.attn", 0),
            ("enter", f"{p}.ln_ffn", 0), ("ops", "ln", 1), ("exit", f"{p}.ln_ffn", 0),
            ("enter", f"{p}.ffn", 0),
            ("enter", f"{p}.ffn.fc1", 0), ("ops", "linear", 2), ("exit", f"{p}.ffn.fc1", 0),
            ("enter", f"{p}.ffn.act", 0), ("ops", "gelu", 1), ("exit", f"{p}.ffn.act", 0),
            ("enter", f"{p}.ffn.fc2", 0), ("ops", "linear", 2), ("exit", f"{p}.ffn.fc2", 0),
            ("exit", f"{p}.ffn", 0),
            ("exit", p, 0),
        ]  # fmt: skip
    tree += [("enter", "encoder.ln_out", 0), ("ops", "ln", 1), ("exit", "encoder.ln_out", 0), ("exit", "encoder", 0)]
    tree += [("enter", "pooler", 0), ("ops", "pool", 2), ("exit", "pooler", 0)]
    tree += [("enter", "classifier", 0), ("ops", "cls", 1), ("exit", "classifier", 0), ("exit", "model", 0)]

    groups = [t for t in tree if t[0] == "ops"]
    w = np.array([g[2] for g in groups])
    share = w * n_ops / w.sum()
    counts = np.floor(share).astype(np.int64)
    extra = n_ops - int(counts.sum())
    counts[np.argsort(-(share - counts), kind="stable")[:extra]] += 1

    module_names: list[str] = []
    module_index: dict[str, int] = {}
    items: list[np.ndarray] = []
    modules: list[np.ndarray] = []
    kinds: list[np.ndarray] = []
    names: list[np.ndarray] = []
    g = 0
    for what, name, _ in tree:
        if what == "ops":
            c = int(counts[g])
            g += 1
            pool = pools[name]
            rank = np.arange(len(pool))
            p = 1.0 / (rank + 1.0)  # a few kernels of each part dominate, as in real traces
            picked = rng.choice(len(pool), size=c, p=p / p.sum()) + offsets[name]
            roll = rng.random(c)
            kind = np.full(c, Kind.KERNEL, dtype=np.uint8)
            kind[roll < 0.03] = Kind.MEMCPY  # device-to-device copies (contiguous(), cat)
            kind[roll > 0.985] = Kind.MEMSET
            items.append(np.full(c, _OP, dtype=np.int8))
            modules.append(np.full(c, -1, dtype=np.int32))
            kinds.append(kind)
            names.append(np.where(kind == Kind.KERNEL, picked, -1).astype(np.int32))
        else:
            if name not in module_index:
                module_index[name] = len(module_names)
                module_names.append(name)
            items.append(np.array([_ENTER if what == "enter" else _EXIT], dtype=np.int8))
            modules.append(np.array([module_index[name]], dtype=np.int32))
            kinds.append(np.zeros(1, dtype=np.uint8))
            names.append(np.array([-1], dtype=np.int32))
    return _Forward(
        item=np.concatenate(items),
        module=np.concatenate(modules),
        op_kind=np.concatenate(kinds),
        op_name=np.concatenate(names),
        module_names=module_names,
    )


# -- the trace ---------------------------------------------------------------------------------


def _plan(n_events: int) -> tuple[int, int, int]:
    """Layers per forward, GPU operations in all, CPU samples: sized so the total comes out at n_events."""
    n_layers = int(np.clip(round((0.003 * n_events / (ROUNDS * FORWARDS_PER_ROUND) - 6) / 9), 1, 24))
    n_modules = ROUNDS * FORWARDS_PER_ROUND * (6 + 9 * n_layers)
    fixed = 1 + ROUNDS * (1 + SCOPES_PER_ROUND + 1 + 2) + n_modules  # test, rounds, scopes, marks, boundary RSS
    round_cpu_ns = _TOKENIZE_NS + _PAD_NS + _POST_CPU_NS + n_modules / ROUNDS * (_ENTER_NS + _EXIT_NS)
    # Samples (~1 per ms) and periodic RSS (1 per 10 samples) grow with the duration, which grows with the ops.
    per_ms = 1.1 / MS
    n_ops = int((n_events - fixed - ROUNDS * round_cpu_ns * per_ms) / (2 + _OP_NS * per_ms))
    n_samples = round((ROUNDS * round_cpu_ns + n_ops * _OP_NS) / MS)
    n_ops = (n_events - fixed - n_samples - n_samples // 10) // 2
    min_ops = ROUNDS * (2 * FORWARDS_PER_ROUND + FORWARDS_PER_ROUND + 2 * FORWARDS_PER_ROUND + FORWARDS_PER_ROUND)
    if n_ops < min_ops:
        raise ValueError(f"n_events={n_events} is too few for this layout; use at least {MIN_EVENTS}")
    return n_layers, n_ops, n_samples


def _queue(ready: np.ndarray, dur: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Start times of GPU records, one at a time per stream, in issue order: start = max(ready, previous end)."""
    start = np.empty_like(ready)
    for s in np.unique(stream):
        sel = np.flatnonzero(stream == s)
        d = dur[sel]
        before = np.concatenate(([0], np.cumsum(d)[:-1]))  # work queued ahead on this stream
        start[sel] = before + np.maximum.accumulate(ready[sel] - before)
    return start


def _records(n: int, kind: int, name: int | np.ndarray, start: np.ndarray | int, end: np.ndarray | int) -> np.ndarray:
    """`n` host records of one kind on the test thread (callers fill in what differs)."""
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["start"], ev["end"], ev["kind"], ev["name"] = start, end, kind, name
    ev["tid"], ev["stream"], ev["device"], ev["domain"] = TEST_TID, -1, -1, Domain.HOST
    return ev


class _Generator:
    """Shared state of one trace: the RNG, the string table, the name ids and the forward template."""

    def __init__(self, n_events: int, seed: int) -> None:
        self.rng = rng = np.random.default_rng(seed)
        self.n_layers, self.n_ops, self.n_samples = _plan(n_events)
        self.strings = st = StringTable()
        pools = _kernel_pools()
        offsets: dict[str, int] = {}
        kernel_names: list[str] = []
        kernel_base: list[float] = []
        for part, pool in pools.items():
            offsets[part] = len(kernel_names)
            kernel_names += [n for n, _ in pool]
            kernel_base += [d for _, d in pool]
        # Each kernel keeps a typical duration of its own, around its family's.
        self.base_ns = np.asarray(kernel_base) * rng.lognormal(0.0, 0.35, len(kernel_base))
        self.kernel_sid = np.array([st.intern(n) for n in kernel_names], dtype=np.int32)
        self.post_pool = np.arange(offsets["post"], offsets["post"] + len(pools["post"]))
        self.runtime_sid = np.zeros(Kind.MEMSET + 1, np.int32)
        for k, n in (
            (Kind.KERNEL, "cudaLaunchKernel"),
            (Kind.MEMCPY, "cudaMemcpyAsync"),
            (Kind.MEMSET, "cudaMemsetAsync"),
        ):
            self.runtime_sid[k] = st.intern(n)
        self.launch_ex_sid = st.intern("cuLaunchKernelEx")
        self.copy_sid = {
            (CopyKind.HTOD, MemoryKind.PAGEABLE): st.intern("Memcpy HtoD (Pageable -> Device)"),
            (CopyKind.HTOD, MemoryKind.PINNED): st.intern("Memcpy HtoD (Pinned -> Device)"),
            (CopyKind.DTOH, MemoryKind.PAGEABLE): st.intern("Memcpy DtoH (Device -> Pageable)"),
            (CopyKind.DTOH, MemoryKind.PINNED): st.intern("Memcpy DtoH (Device -> Pinned)"),
            (CopyKind.DTOD, MemoryKind.DEVICE): st.intern("Memcpy DtoD (Device -> Device)"),
        }
        self.memset_sid = st.intern("Memset (Device)")
        self.scope_sid = {s: st.intern(s) for s in ("preprocess", "tokenize", "forward", "postprocess")}
        self.round_sid, self.mark_sid, self.rss_sid = st.intern("round"), st.intern("batch_ready"), st.intern("rss")
        self.test_sid = st.intern("tests/test_inference.py::test_end_to_end_pipeline[synthetic]")

        # Streams: 2-4; the first runs the model, a second takes some kernels, a third the uploads.
        n_streams = int(rng.integers(2, 5))
        self.streams = np.array([7, 13, 14, 15][:n_streams], dtype=np.int32)
        self.side_streams = self.streams[[1, 3]] if n_streams == 4 else self.streams[1:2]
        self.copy_stream = self.streams[2] if n_streams >= 3 else self.streams[0]

        # Ops per round: uploads (2 per forward), the forwards, postprocess kernels, downloads.
        self.per_round = np.full(ROUNDS, self.n_ops // ROUNDS)
        self.per_round[: self.n_ops % ROUNDS] += 1
        self.n_htod, self.n_dtoh = 2 * FORWARDS_PER_ROUND, FORWARDS_PER_ROUND
        spare = int(self.per_round.min()) - self.n_htod - self.n_dtoh - 2 * FORWARDS_PER_ROUND
        self.fwd_ops = spare // FORWARDS_PER_ROUND
        self.template = _forward_template(self.n_layers, self.fwd_ops, rng, pools, offsets)
        self.module_sid = np.array([st.intern(n) for n in self.template.module_names], dtype=np.int32)
        self.attrs: list[dict[str, object]] = []
        self.scopes: list[tuple[int, int, str]] = []  # (start, end, name), to pick sample stacks
        self.corr_next = 1_000

    def round(self, r: int, rs: int) -> tuple[list[np.ndarray], int]:
        """The events of round `r` starting at host time `rs`, and the round's end."""
        rng, tpl, F = self.rng, self.template, FORWARDS_PER_ROUND
        n_htod, n_dtoh = self.n_htod, self.n_dtoh
        n_post = int(self.per_round[r]) - n_htod - n_dtoh - F * self.fwd_ops
        nf = len(tpl.item)
        pre_s = rs + 20 * US
        tok_s = pre_s + 10 * US
        tok_e = tok_s + int(rng.normal(_TOKENIZE_NS, 0.05 * _TOKENIZE_NS))

        # The host items of the round in order: uploads, F forwards, postprocess kernels, downloads.
        item = np.concatenate(
            [np.full(n_htod, _OP, np.int8), np.tile(tpl.item, F), np.full(n_post + n_dtoh, _OP, np.int8)]
        )
        module = np.concatenate(
            [np.full(n_htod, -1, np.int32), np.tile(tpl.module, F), np.full(n_post + n_dtoh, -1, np.int32)]
        )
        kind = np.concatenate([
            np.full(n_htod, Kind.MEMCPY, np.uint8), np.tile(tpl.op_kind, F),
            np.full(n_post, Kind.KERNEL, np.uint8), np.full(n_dtoh, Kind.MEMCPY, np.uint8),
        ])  # fmt: skip
        kname = np.concatenate([
            np.full(n_htod, -1, np.int32), np.tile(tpl.op_name, F),
            rng.choice(self.post_pool, n_post).astype(np.int32), np.full(n_dtoh, -1, np.int32),
        ])  # fmt: skip
        in_forward = np.zeros(len(item), bool)
        in_forward[n_htod : n_htod + nf * F] = True
        copy_kind = np.zeros(len(item), np.uint8)
        copy_kind[:n_htod] = CopyKind.HTOD
        copy_kind[len(item) - n_dtoh :] = CopyKind.DTOH
        copy_kind[(kind == Kind.MEMCPY) & (copy_kind == 0)] = CopyKind.DTOD

        # Host time of every item: Python before it, its own duration, and jumps where the
        # round changes phase (tokenize + padding before the uploads, the mark and scope
        # change before the forward, Python between forwards, before the postprocess).
        n = len(item)
        is_op = item == _OP
        lo = np.select([item == _ENTER, item == _EXIT, kind == Kind.MEMCPY, kind == Kind.MEMSET], [6, 2, 5, 3], 3) * US
        hi = (
            np.select([item == _ENTER, item == _EXIT, kind == Kind.MEMCPY, kind == Kind.MEMSET], [14, 5, 12, 5], 6) * US
        )
        dur = rng.uniform(lo, hi)
        gap = np.where(is_op, rng.uniform(3 * US, 9 * US, n), 0.0)
        jump = np.zeros(n)
        jump[0] = tok_e - rs + _PAD_NS
        jump[n_htod] = 45 * US
        jump[n_htod + nf : n_htod + nf * F : nf] = rng.uniform(20 * US, 40 * US, F - 1)
        post_first = n_htod + nf * F
        jump[post_first] = 60 * US
        begin = (rs + np.concatenate(([0.0], np.cumsum(gap + dur + jump)[:-1])) + jump + gap).astype(np.int64)
        end = begin + dur.astype(np.int64)

        # GPU records: bytes, durations, streams, and when each could start.
        ops = np.flatnonzero(is_op)
        ok, ock = kind[ops], copy_kind[ops]
        pinned = bool(rng.random() < 0.5)
        host_mem = MemoryKind.PINNED if pinned else MemoryKind.PAGEABLE
        nbytes = np.zeros(len(ops), np.int64)
        nbytes[ock == CopyKind.HTOD] = rng.choice([16 * 128 * 8, 16 * 128], n_htod)
        nbytes[ock == CopyKind.DTOH] = 16 * 6 * 4
        dtod, ms = ock == CopyKind.DTOD, ok == Kind.MEMSET
        nbytes[dtod] = rng.integers(64 * 1024, 4 * 1024 * 1024, int(dtod.sum()))
        nbytes[ms] = rng.integers(4 * 1024, 1024 * 1024, int(ms.sum()))
        bw = np.where(dtod, 1_500.0, 22.0 if pinned else 8.0)  # bytes per ns
        jitter = rng.lognormal(0.0, 0.08, len(ops))
        gdur = np.select(
            [ok == Kind.KERNEL, ok == Kind.MEMCPY, ms],
            [self.base_ns[np.maximum(kname[ops], 0)] * jitter, 1_400 + nbytes / bw, 1_200 + nbytes / 2_000.0],
        ).astype(np.int64)
        gstream = np.full(len(ops), self.streams[0], np.int32)
        side = (ok == Kind.KERNEL) & in_forward[ops] & (rng.random(len(ops)) < 0.15)
        gstream[side] = rng.choice(self.side_streams, int(side.sum()))
        gstream[ock == CopyKind.HTOD] = self.copy_stream
        ready = begin[ops] + rng.integers(5 * US, 20 * US + 1, len(ops))
        gstart = _queue(ready, gdur, gstream)

        # Downloads of the logits block the host until they are done: their calls end after
        # the copy, and everything after them on the host moves later by the wait.
        for j in np.flatnonzero(ock == CopyKind.DTOH).tolist():
            i = ops[j]
            wait = int(gstart[j] + gdur[j]) + 2 * US - int(end[i])
            if wait > 0:
                end[i] += wait
                begin[i + 1 :] += wait
                end[i + 1 :] += wait
                ready[j + 1 :] += wait
                gstart = _queue(ready, gdur, gstream)
        gend = gstart + gdur
        post_cpu_end = int(end[-1]) + int(rng.normal(_POST_CPU_NS, 0.1 * _POST_CPU_NS))
        post_e = max(post_cpu_end, int(gend.max()) + 5 * US) + 5 * US  # the round's device synchronise
        re = post_e + 10 * US

        # Host spans: the round, its scopes, the modules, the mark, RSS at the boundaries.
        pre_e = int(end[n_htod - 1]) + 10 * US
        fwd_s, fwd_e = pre_e + 8 * US, int(end[post_first - 1]) + 5 * US
        post_s = fwd_e + 10 * US
        sid = self.scope_sid
        spans = _records(
            5,
            Kind.SCOPE,
            np.array([self.round_sid, sid["preprocess"], sid["tokenize"], sid["forward"], sid["postprocess"]]),
            np.array([rs, pre_s, tok_s, fwd_s, post_s]),
            np.array([re, pre_e, tok_e, fwd_e, post_e]),
        )
        spans["kind"][0], spans["value"][0] = Kind.ROUND, r
        spans["flags"][0] = kind_flags(RoundKind.WARMUP if r < WARMUP_ROUNDS else RoundKind.MEASURED)
        self.scopes += [(tok_s, tok_e, "tokenize"), (pre_s, pre_e, "preprocess")]
        self.scopes += [(fwd_s, fwd_e, "forward"), (post_s, post_e, "postprocess")]
        # Depth-first order: the k-th exit of a module closes its k-th enter.
        enter, exit_ = np.flatnonzero(item == _ENTER), np.flatnonzero(item == _EXIT)
        en = enter[np.lexsort((enter, module[enter]))]
        ex = exit_[np.lexsort((exit_, module[exit_]))]
        mods = _records(len(en), Kind.MODULE, self.module_sid[module[en]], begin[en], end[ex])
        mark = _records(1, Kind.MARK, self.mark_sid, pre_e + 2 * US, pre_e + 2 * US)
        mark["value"] = len(self.attrs)
        self.attrs.append({"size": 32, "round": r})
        rss = _records(2, Kind.MEMORY, self.rss_sid, np.array([rs, re]), np.array([rs, re]))
        rss["value"] = 1_150 * 1024 * 1024 + r * 2 * 1024 * 1024 + rng.integers(0, 512 * 1024, 2)
        rss["flags"] = MemoryFlag.BOUNDARY

        # Runtime records (host side of each launch, on the CUPTI clock) and the GPU records.
        corr = np.arange(self.corr_next, self.corr_next + len(ops), dtype=np.uint32)
        self.corr_next += len(ops)
        rt = np.zeros(len(ops), dtype=EVENT_DTYPE)
        rt["start"], rt["end"] = begin[ops] + DEVICE_OFFSET_NS, end[ops] + DEVICE_OFFSET_NS
        rt["kind"], rt["corr"], rt["tid"], rt["stream"], rt["device"] = Kind.RUNTIME, corr, TEST_TID, -1, -1
        rt["domain"] = Domain.DEVICE
        rt["name"] = self.runtime_sid[ok]
        rt["name"][(ok == Kind.KERNEL) & (rng.random(len(ops)) < 0.05)] = self.launch_ex_sid

        dev = np.zeros(len(ops), dtype=EVENT_DTYPE)
        dev["start"], dev["end"] = gstart + DEVICE_OFFSET_NS, gend + DEVICE_OFFSET_NS
        dev["kind"], dev["value"], dev["corr"], dev["tid"] = ok, nbytes, corr, -1
        dev["stream"], dev["device"], dev["domain"] = gstream, DEVICE, Domain.DEVICE
        src = np.where(ock == CopyKind.HTOD, host_mem, MemoryKind.DEVICE).astype(np.uint32)
        dst = np.where(ock == CopyKind.DTOH, host_mem, MemoryKind.DEVICE).astype(np.uint32)
        names = np.full(len(ops), self.memset_sid, np.int32)
        kern = ok == Kind.KERNEL
        names[kern] = self.kernel_sid[kname[ops][kern]]
        for (ck, mk), copy_name in self.copy_sid.items():
            names[(ock == ck) & ((src == mk) if ck == CopyKind.HTOD else (dst == mk))] = copy_name
        dev["name"] = names
        cp = ok == Kind.MEMCPY
        dev["flags"][cp] = copy_flags(ock[cp].astype(np.uint32), src[cp], dst[cp])
        return [spans, mods, mark, rss, rt, dev], re

    def samples(self, test_s: int, test_e: int) -> np.ndarray:
        """Contiguous ~1 ms CPU samples over the test, with stacks from the phase each falls in."""
        rng, n = self.rng, self.n_samples
        period = rng.uniform(0.95, 1.05, n)
        edges = test_s + np.concatenate(([0.0], np.cumsum(period) / period.sum() * (test_e - test_s))).astype(np.int64)
        edges[-1] = test_e
        mid = (edges[:-1] + edges[1:]) // 2
        # Outer scopes first, so that an inner one (tokenize in preprocess) overwrites them.
        phase_of = np.full(n, "other", dtype=object)
        for s, e, name in sorted(self.scopes, key=lambda x: (x[0], -x[1])):
            lo, hi = np.searchsorted(mid, [s, e])
            phase_of[lo:hi] = name
        names = np.empty(n, np.int32)
        for phase, pool in _stack_pools().items():
            sel = np.flatnonzero(phase_of == phase)
            names[sel] = rng.choice([self.strings.intern(s) for s in pool], len(sel))
        return _records(n, Kind.SAMPLE, names, edges[:-1], edges[1:])

    def periodic_rss(self, n: int, samples: np.ndarray, test_s: int) -> np.ndarray:
        """`n` RSS readings, taken by the sampler about every 10th sample."""
        at = samples["end"][np.linspace(9, len(samples) - 2, n).astype(np.int64)] if n else samples["end"][:0]
        rss = _records(n, Kind.MEMORY, self.rss_sid, at, at)
        rss["value"] = 1_150 * 1024 * 1024 + (at - test_s) // 200 + self.rng.integers(0, 256 * 1024, n)
        rss["flags"] = MemoryFlag.RSS
        return rss


def make_raw_trace(n_events: int, seed: int = 0) -> RawTrace:
    """Build a synthetic raw trace of exactly `n_events` events (see the module docstring)."""
    if n_events < MIN_EVENTS:
        raise ValueError(f"n_events must be at least {MIN_EVENTS}, got {n_events}")
    gen = _Generator(n_events, seed)
    parts: list[np.ndarray] = []
    t = test_s = HOST_T0_NS
    for r in range(ROUNDS):
        events, re = gen.round(r, t + (80 * US if r == 0 else int(gen.rng.integers(30 * US, 80 * US))))
        parts += events
        t = re
    test_e = t + 60 * US
    test = _records(1, Kind.TEST, gen.test_sid, test_s, test_e)
    samples = gen.samples(test_s, test_e)
    # The periodic RSS readings take up the rounding, so that the total is exactly n_events.
    n_rss = n_events - 1 - len(samples) - sum(len(p) for p in parts)
    events = np.concatenate([test, *parts, samples, gen.periodic_rss(n_rss, samples, test_s)])
    clock_pairs = [(h, h + DEVICE_OFFSET_NS) for h in (test_s - 50 * US, test_e + 200 * US)]
    return RawTrace(events=events, strings=gen.strings.strings, attrs=gen.attrs, clock_pairs=clock_pairs, t0_ns=test_s)


def main(argv: list[str] | None = None) -> int:
    """Build a trace, print its composition and timing, merge it and check causality."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n_events", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-merge", action="store_true", help="only build the trace")
    args = parser.parse_args(argv)

    make_raw_trace(MIN_EVENTS, args.seed)  # warm imports and caches
    t0 = time.perf_counter()
    raw = make_raw_trace(args.n_events, args.seed)
    built = time.perf_counter() - t0
    ev = raw.events
    print(f"{len(ev):,} events (asked {args.n_events:,}) in {built * 1e3:.0f} ms; {len(raw.strings)} names")
    kinds, counts = np.unique(ev["kind"], return_counts=True)
    for k, c in zip(kinds.tolist(), counts.tolist(), strict=True):
        print(f"  {Kind(k).name:<8} {c:>10,}")
    gpu = ev[np.isin(ev["kind"], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])]
    test = ev[ev["kind"] == Kind.TEST][0]
    print(
        f"  streams {sorted(set(gpu['stream'].tolist()))}; the test spans {(test['end'] - test['start']) / 1e9:.2f} s"
    )
    if args.no_merge:
        return 0

    from pytest_inferscope.merger import merge

    t0 = time.perf_counter()
    timeline = merge(raw)
    merged = time.perf_counter() - t0
    fit = timeline.clock
    print(
        f"merge: {merged:.2f} s; rate {fit.rate:.9f}, residual {fit.residual_ns:.0f} ns, "
        f"causality violations {fit.causality_violations}"
    )
    return 0 if fit.causality_violations == 0 and fit.ok else 1


if __name__ == "__main__":
    sys.exit(main())
