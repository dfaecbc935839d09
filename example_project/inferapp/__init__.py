"""inferapp: a small text-classification inference service, the example project for pytest-inferscope.

Texts go through a pure-Python word-piece tokenizer, are padded into batches, run through a
small encoder-only transformer with seeded random weights (nothing is downloaded), and come
out as top-k labels. See README.md beside this package for what the example tests show.
"""

from __future__ import annotations

from .batching import Batch, DynamicBatcher, pad_batch
from .data import LABELS, make_requests
from .model import EncoderClassifier, ModelConfig, build_model, small, tiny
from .pipeline import InferencePipeline, Prediction, resolve_device
from .tokenizer import Tokenizer

__all__ = [
    "LABELS",
    "Batch",
    "DynamicBatcher",
    "EncoderClassifier",
    "InferencePipeline",
    "ModelConfig",
    "Prediction",
    "Tokenizer",
    "build_model",
    "build_pipeline",
    "make_requests",
    "pad_batch",
    "resolve_device",
    "small",
    "tiny",
]


def build_pipeline(preset: str = "tiny", device: str = "cpu", seed: int = 0) -> InferencePipeline:
    """A ready pipeline: the default tokenizer and a seeded model of the named preset."""
    presets = {"tiny": tiny, "small": small}
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(presets)}")
    tokenizer = Tokenizer()
    model = build_model(presets[preset](tokenizer.vocab_size, seed=seed))
    return InferencePipeline(tokenizer, model, device=device)
