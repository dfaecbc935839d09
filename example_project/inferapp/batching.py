"""Batching: turns lists of token ids into padded tensors, and groups requests by length.

`pad_batch` pads (or truncates) token-id lists to one length and returns the model's
inputs as tensors. `DynamicBatcher` sorts requests by length and packs them into batches
under a size and a token budget, so that short requests are not padded to the length of
the longest one; `DynamicBatcher.scatter` puts per-batch results back in request order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

Inputs = dict[str, torch.Tensor]


def pad_batch(
    sequences: Sequence[Sequence[int]],
    pad_id: int,
    max_len: int | None = None,
    pad_to_max_len: bool = False,
    multiple_of: int | None = None,
    sep_id: int | None = None,
) -> Inputs:
    """Pad token-id lists into `input_ids` (int64) and `attention_mask` (bool, True = real token).

    Sequences longer than `max_len` are truncated; if `sep_id` is given, a truncated
    sequence keeps it as its last token. The batch is padded to its longest sequence, or to
    `max_len` with `pad_to_max_len`, rounded up to `multiple_of` (but never past `max_len`).
    """
    if not sequences:
        raise ValueError("cannot pad an empty batch")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    rows: list[list[int]] = []
    for seq in sequences:
        row = list(seq)
        if max_len is not None and len(row) > max_len:
            row = row[:max_len]
            if sep_id is not None:
                row[-1] = sep_id
        rows.append(row)
    longest = max(len(r) for r in rows)
    if pad_to_max_len:
        if max_len is None:
            raise ValueError("pad_to_max_len needs max_len")
        longest = max_len
    if multiple_of:
        longest = -(-longest // multiple_of) * multiple_of
        if max_len is not None:
            longest = min(longest, max_len)
    longest = max(longest, 1)
    input_ids = torch.tensor([r + [pad_id] * (longest - len(r)) for r in rows], dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    attention_mask = torch.arange(longest).unsqueeze(0) < lengths.unsqueeze(1)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass
class Batch:
    """One padded batch and the positions of its rows in the original request list."""

    indices: list[int]
    inputs: Inputs = field(repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        b, t = self.inputs["input_ids"].shape
        return int(b), int(t)

    @property
    def padding_fraction(self) -> float:
        """Share of the batch's token slots that are padding (wasted compute)."""
        mask = self.inputs["attention_mask"]
        return 1.0 - float(mask.sum()) / mask.numel()


class DynamicBatcher:
    """Groups requests of similar length into batches bounded by size and token count."""

    def __init__(
        self,
        pad_id: int,
        max_batch_size: int = 16,
        max_tokens: int = 4096,
        max_len: int = 128,
        multiple_of: int | None = 8,
        sep_id: int | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_tokens < max_len:
            raise ValueError(f"max_tokens ({max_tokens}) must hold at least one sequence of max_len ({max_len})")
        self.pad_id = pad_id
        self.max_batch_size = max_batch_size
        self.max_tokens = max_tokens
        self.max_len = max_len
        self.multiple_of = multiple_of
        self.sep_id = sep_id

    def _padded_len(self, n: int) -> int:
        n = min(n, self.max_len)
        if self.multiple_of:
            n = min(-(-n // self.multiple_of) * self.multiple_of, self.max_len)
        return max(n, 1)

    def plan(self, lengths: Sequence[int]) -> list[list[int]]:
        """Request indices per batch: sorted by length, packed greedily under both budgets."""
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        groups: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # Sorted ascending, so the newest request is the longest in its batch.
            width = self._padded_len(lengths[i])
            if current and (len(current) + 1 > self.max_batch_size or (len(current) + 1) * width > self.max_tokens):
                groups.append(current)
                current = []
            current.append(i)
        if current:
            groups.append(current)
        return groups

    def batches(self, sequences: Sequence[Sequence[int]]) -> list[Batch]:
        """Padded batches covering every sequence exactly once."""
        groups = self.plan([len(s) for s in sequences])
        return [
            Batch(
                indices=g,
                inputs=pad_batch(
                    [sequences[i] for i in g],
                    pad_id=self.pad_id,
                    max_len=self.max_len,
                    multiple_of=self.multiple_of,
                    sep_id=self.sep_id,
                ),
            )
            for g in groups
        ]

    @staticmethod
    def scatter(batches: Sequence[Batch], outputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Reassemble per-batch outputs (first dim = batch rows) in the original request order."""
        if len(batches) != len(outputs):
            raise ValueError(f"{len(batches)} batches but {len(outputs)} outputs")
        n = sum(len(b.indices) for b in batches)
        first = outputs[0]
        result = first.new_empty((n, *first.shape[1:]))
        for b, out in zip(batches, outputs, strict=True):
            result[torch.as_tensor(b.indices, device=out.device)] = out
        return result
