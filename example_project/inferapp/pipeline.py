"""The inference pipeline: texts in, labels out, in three stages that can be timed apart.

`preprocess` tokenizes and pads on the host, `forward` runs the model under
`torch.inference_mode()` on the chosen device, `postprocess` turns logits into the top-k
labels with their probabilities. `__call__` chains the three; `predict_batched` runs a
long list of texts through a `DynamicBatcher` so similar lengths share a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .batching import DynamicBatcher, Inputs, pad_batch
from .model import EncoderClassifier
from .tokenizer import Tokenizer


def resolve_device(device: str | torch.device) -> torch.device:
    """The device to run on: exactly the one asked for, or a clear error if it is not there.

    "auto" picks CUDA when it is available and the CPU otherwise; a CUDA device is never
    chosen unless asked for (or "auto"), and asking for one that is missing fails instead
    of silently falling back to the CPU, so timings always say where they came from.
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {str(device)!r} was asked for, but CUDA is not available in this torch build")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            n = torch.cuda.device_count()
            raise RuntimeError(f"device {str(device)!r} was asked for, but only {n} GPU(s) exist")
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {str(device)!r}: use 'cpu', 'cuda', 'cuda:N' or 'auto'")
    return dev


@dataclass(frozen=True)
class Prediction:
    """The top-k labels of one text, best first, with their probabilities."""

    labels: tuple[str, ...]
    scores: tuple[float, ...]

    @property
    def label(self) -> str:
        return self.labels[0]

    @property
    def score(self) -> float:
        return self.scores[0]


class InferencePipeline:
    """Tokenizer + model on one device: preprocess, forward, postprocess."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        model: EncoderClassifier,
        device: str | torch.device = "cpu",
        max_len: int = 128,
        top_k: int = 3,
    ) -> None:
        if max_len > model.config.max_len:
            raise ValueError(f"max_len {max_len} exceeds the model's max_len {model.config.max_len}")
        if not 1 <= top_k <= model.config.n_labels:
            raise ValueError(f"top_k must be in [1, {model.config.n_labels}], got {top_k}")
        self.tokenizer = tokenizer
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.labels = model.config.labels
        self.max_len = max_len
        self.top_k = top_k

    def preprocess(self, texts: Sequence[str]) -> Inputs:
        """Tokenize and pad on the host, then move the tensors to the device."""
        ids = self.tokenizer.encode_batch(texts, max_len=self.max_len)
        inputs = pad_batch(ids, pad_id=self.tokenizer.pad_id, max_len=self.max_len, multiple_of=8)
        return self._to_device(inputs)

    def _to_device(self, inputs: Inputs) -> Inputs:
        if self.device.type == "cpu":
            return inputs
        # Pinned host memory makes the copy asynchronous; the forward waits for it on-stream.
        return {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in inputs.items()}

    def forward(self, inputs: Inputs) -> torch.Tensor:
        """Logits (batch, n_labels), computed without autograd bookkeeping."""
        with torch.inference_mode():
            return self.model(**inputs)

    def postprocess(self, logits: torch.Tensor) -> list[Prediction]:
        """Softmax and the top-k labels of every row (one device-to-host copy for the batch)."""
        k = self.top_k
        with torch.inference_mode():
            probs = torch.softmax(logits.float(), dim=-1)
            scores, idx = probs.topk(k, dim=-1)
            scores_l, idx_l = scores.cpu().tolist(), idx.cpu().tolist()
        return [
            Prediction(labels=tuple(self.labels[j] for j in row_idx), scores=tuple(row_scores))
            for row_idx, row_scores in zip(idx_l, scores_l, strict=True)
        ]

    def __call__(self, texts: Sequence[str]) -> list[Prediction]:
        return self.postprocess(self.forward(self.preprocess(texts)))

    def predict_batched(
        self, texts: Sequence[str], max_batch_size: int = 16, max_tokens: int = 2048
    ) -> list[Prediction]:
        """Predictions for many texts, batched by length; results come back in input order."""
        if not texts:
            return []
        ids = self.tokenizer.encode_batch(texts, max_len=self.max_len)
        batcher = DynamicBatcher(
            pad_id=self.tokenizer.pad_id,
            max_batch_size=max_batch_size,
            max_tokens=max(max_tokens, self.max_len),
            max_len=self.max_len,
            sep_id=self.tokenizer.sep_id,
        )
        batches = batcher.batches(ids)
        logits = [self.forward(self._to_device(b.inputs)) for b in batches]
        return self.postprocess(DynamicBatcher.scatter(batches, logits))
