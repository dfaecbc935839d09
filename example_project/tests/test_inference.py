"""Performance tests of the example app, written the way a user of pytest-inferscope writes them.

Each marked test is also a real test: it asserts on what the code returned. The plugin
runs the body `warmup + rounds` times with the same fixtures and checks the marker's
thresholds at teardown. Thresholds are about 5x what a 2-core CI machine measures (see
README.md), so they catch a real regression without flaking on a busy runner; the
baseline comparison (`--inferscope-compare`) is what catches the small ones.
"""

from __future__ import annotations

import pytest
import torch
from inferapp import LABELS, InferencePipeline, Tokenizer
from inferapp.batching import Inputs
from inferapp.model import EncoderClassifier


@pytest.mark.inferscope(max_latency_ms=60, rounds=10, warmup=2)
def test_batch_forward(model: EncoderClassifier, batch: Inputs) -> None:
    """A fixed-shape forward (8 x 64 tokens): the latency budget of one model call."""
    with torch.inference_mode():
        logits = model(**batch)
    assert logits.shape == (len(batch["input_ids"]), model.config.n_labels)
    assert torch.isfinite(logits).all()


@pytest.mark.inferscope(expect_bottleneck="cpu_bound", rounds=5, warmup=1)
def test_tokenize_requests(tokenizer: Tokenizer, requests: list[str]) -> None:
    """Tokenizing 32 requests: a pure-Python hot loop, so the verdict must be cpu_bound."""
    ids = tokenizer.encode_batch(requests, max_len=128)
    assert len(ids) == len(requests)
    assert all(seq[0] == tokenizer.cls_id and seq[-1] == tokenizer.sep_id for seq in ids)
    assert all(3 <= len(seq) <= 128 for seq in ids)
    n_unk = sum(seq.count(tokenizer.unk_id) for seq in ids)
    assert n_unk < 0.02 * sum(map(len, ids))  # only emoji and the like are unknown


@pytest.mark.inferscope(max_host_memory_mb=4096, rounds=5, warmup=1)
def test_end_to_end_pipeline(pipeline: InferencePipeline, requests: list[str], inferscope) -> None:
    """The whole request path, with user scopes so the report splits time by stage."""
    with inferscope.scope("preprocess"):
        batch = pipeline.preprocess(requests)
    inferscope.mark_event("batch_ready", size=len(requests))
    with inferscope.scope("forward"):
        logits = pipeline.forward(batch)
    with inferscope.scope("postprocess"):
        predictions = pipeline.postprocess(logits)

    assert batch["input_ids"].shape[0] == len(requests)
    assert logits.shape == (len(requests), len(LABELS))
    assert len(predictions) == len(requests)
    for p in predictions:
        assert len(p.labels) == pipeline.top_k and set(p.labels) <= set(LABELS)
        assert list(p.scores) == sorted(p.scores, reverse=True) and 0.0 < p.score <= 1.0
