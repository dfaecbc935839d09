"""The model: a small encoder-only transformer that classifies support requests.

Weights are random from a fixed seed (nothing is downloaded), so the model is the same on
every machine and its outputs are reproducible; the labels it predicts are therefore
arbitrary, but its cost and its module structure are those of a real BERT-style
classifier: token + position embeddings, pre-LN encoder blocks (multi-head self-attention
and a GELU feed-forward network), a [CLS] pooler and a linear classification head.

Module names follow the usual layout (`encoder.layers.3.attn`, `encoder.layers.3.ffn`), so
per-module timings in a profile read like those of a Hugging Face model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn

from .data import LABELS


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model; `seed` fixes its random weights."""

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ffn: int = 512
    max_len: int = 256
    labels: tuple[str, ...] = field(default=LABELS)
    dropout: float = 0.1  # only active in train mode; inference runs in eval mode
    seed: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size < 4:
            raise ValueError(f"vocab_size must cover at least the 4 special tokens, got {self.vocab_size}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        for name in ("d_model", "n_heads", "n_layers", "d_ffn", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if len(self.labels) < 2:
            raise ValueError(f"need at least 2 labels, got {self.labels!r}")

    @property
    def n_labels(self) -> int:
        return len(self.labels)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def tiny(vocab_size: int, **overrides: Any) -> ModelConfig:
    """The test preset: 2 layers of width 128; a batch of 8 x 64 tokens runs in a few ms on 2 cores."""
    base = ModelConfig(vocab_size, d_model=128, n_heads=4, n_layers=2, d_ffn=512, max_len=256)
    return replace(base, **overrides)


def small(vocab_size: int, **overrides: Any) -> ModelConfig:
    """A heavier preset (6 layers of width 384, about MiniLM's shape) for benchmarks and GPU runs."""
    base = ModelConfig(vocab_size, d_model=384, n_heads=6, n_layers=6, d_ffn=1536, max_len=512)
    return replace(base, **overrides)


class Embeddings(nn.Module):
    """Token plus learned position embeddings."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = nn.Embedding(cfg.max_len, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(self.tokens(input_ids) + self.positions(positions))


class EncoderBlock(nn.Module):
    """One pre-LN transformer block: x + attn(ln(x)), then x + ffn(ln(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, dropout=cfg.dropout, batch_first=True)
        self.ln_ffn = nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ffn),
            nn.GELU(),
            nn.Linear(cfg.d_ffn, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        h = self.ln_attn(x)
        attn_out, _ = self.attn(h, h, h, key_padding_mask=padding_mask, need_weights=False)
        x = x + attn_out
        return x + self.ffn(self.ln_ffn(x))


class Encoder(nn.Module):
    """The stack of encoder blocks and the final layer norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_out = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, padding_mask)
        return self.ln_out(x)


class EncoderClassifier(nn.Module):
    """Sequence classifier: embeddings, encoder, [CLS] pooler, linear head; returns logits."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        # Seed a private RNG stream so that building a model neither depends on nor
        # disturbs the caller's global RNG state.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.embed = Embeddings(cfg)
            self.encoder = Encoder(cfg)
            self.pooler = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.Tanh())
            self.classifier = nn.Linear(cfg.d_model, cfg.n_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of shape (batch, n_labels); `attention_mask` is True (or 1) on real tokens."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.config.max_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_len {self.config.max_len}")
        padding_mask = None if attention_mask is None else ~attention_mask.bool()
        x = self.encoder(self.embed(input_ids), padding_mask)
        return self.classifier(self.pooler(x[:, 0]))


def build_model(cfg: ModelConfig) -> EncoderClassifier:
    """The model for `cfg` with its seeded weights, in eval mode."""
    return EncoderClassifier(cfg).eval()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
