"""Session-wide fixtures: one tokenizer, model and pipeline shared by every example test.

Building them once per session keeps set-up out of the measured rounds; the plugin times
only the test body, rounds after warm-up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from inferapp import InferencePipeline, Tokenizer, build_model, make_requests, pad_batch, tiny
from inferapp.batching import Inputs
from inferapp.model import EncoderClassifier

#: The shape of the `batch` fixture: 8 requests padded or truncated to 64 tokens.
BATCH_SIZE, SEQ_LEN = 8, 64


@pytest.fixture(scope="session", autouse=True)
def _one_intra_op_thread() -> Iterator[None]:
    """Pin torch to one intra-op thread, so CPU timings survive a busy shared runner.

    With two intra-op threads on a 2-core machine, any other busy process leaves torch's
    thread pool waiting for a descheduled worker: the 8 x 64 forward went from 7 ms to a
    median of 50-270 ms. One thread costs about 1.5x on an idle machine and stays within
    about 2x under the same load.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer()


@pytest.fixture(scope="session")
def model(tokenizer: Tokenizer) -> EncoderClassifier:
    return build_model(tiny(tokenizer.vocab_size, seed=0)).eval()


@pytest.fixture(scope="session")
def pipeline(tokenizer: Tokenizer, model: EncoderClassifier) -> InferencePipeline:
    return InferencePipeline(tokenizer, model, device="cpu", max_len=128, top_k=3)


@pytest.fixture(scope="session")
def requests() -> list[str]:
    return make_requests(32, seed=0)


@pytest.fixture(scope="session")
def batch(tokenizer: Tokenizer, requests: list[str]) -> Inputs:
    ids = tokenizer.encode_batch(requests[:BATCH_SIZE], max_len=SEQ_LEN)
    inputs = pad_batch(ids, pad_id=tokenizer.pad_id, max_len=SEQ_LEN, pad_to_max_len=True)
    assert inputs["input_ids"].shape == (BATCH_SIZE, SEQ_LEN)
    return inputs
