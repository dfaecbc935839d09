"""Plain correctness tests of the example app (no profiling): tokenizer, batching, model, pipeline."""

from __future__ import annotations

import pytest
import torch
from inferapp import (
    LABELS,
    DynamicBatcher,
    InferencePipeline,
    Tokenizer,
    build_model,
    make_requests,
    pad_batch,
    resolve_device,
    tiny,
)
from inferapp.batching import Inputs
from inferapp.model import EncoderClassifier
from inferapp.tokenizer import SPECIAL_TOKENS, build_vocab, pre_tokenize

# --- tokenizer ---------------------------------------------------------------------------


def test_vocab_is_deterministic_and_starts_with_special_tokens() -> None:
    vocab = build_vocab()
    assert vocab == build_vocab()
    assert tuple(vocab[: len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS
    assert len(set(vocab)) == len(vocab)


def test_special_token_ids(tokenizer: Tokenizer) -> None:
    ids = {tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id}
    assert ids == {0, 1, 2, 3}


def test_pre_tokenize_lowercases_strips_accents_and_splits_punctuation() -> None:
    assert pre_tokenize("Hello, Léa! Order #123 (late).") == [
        "hello", ",", "lea", "!", "order", "#", "123", "(", "late", ")", ".",
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["the order arrived damaged", "please process a refund", "reset password"])
def test_known_words_round_trip_as_single_tokens(tokenizer: Tokenizer, text: str) -> None:
    pieces = tokenizer.tokenize(text)
    assert pieces == text.split()
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_unseen_word_splits_into_pieces_and_round_trips(tokenizer: Tokenizer) -> None:
    pieces = tokenizer.tokenize("headphones")
    assert len(pieces) > 1
    assert all(p.startswith("##") for p in pieces[1:])
    assert tokenizer.unk_id not in tokenizer.encode("headphones")
    assert tokenizer.decode(tokenizer.encode("headphones")) == "headphones"


def test_unknown_characters_fall_back_to_unk(tokenizer: Tokenizer) -> None:
    assert tokenizer.tokenize("order 👍") == ["order", "[UNK]"]
    # Only the unknown character is lost; the rest of the word is still spelled out.
    pieces = tokenizer.tokenize("order☹ok")
    assert pieces.count("[UNK]") == 1 and pieces[0] == "order"
    assert tokenizer.decode(tokenizer.encode("order 👍")) == "order [UNK]"


def test_punctuation_decodes_onto_its_word(tokenizer: Tokenizer) -> None:
    assert tokenizer.decode(tokenizer.encode("thanks, the order arrived.")) == "thanks, the order arrived."


def test_encode_truncation_keeps_cls_and_sep(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("the order " * 50, max_len=16)
    assert len(ids) == 16
    assert ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.sep_id
    with pytest.raises(ValueError, match="max_len"):
        tokenizer.encode("x", max_len=1)


def test_tokenizer_rejects_vocab_without_special_tokens() -> None:
    with pytest.raises(ValueError, match="special tokens"):
        Tokenizer(["a", "b"])


# --- data --------------------------------------------------------------------------------


def test_requests_are_deterministic_per_seed() -> None:
    assert make_requests(8, seed=3) == make_requests(8, seed=3)
    assert make_requests(8, seed=3) != make_requests(8, seed=4)
    assert len(make_requests(0)) == 0


# --- batching ----------------------------------------------------------------------------


def test_pad_batch_pads_to_longest_and_masks_padding() -> None:
    out = pad_batch([[2, 5, 3], [2, 3]], pad_id=0)
    assert out["input_ids"].tolist() == [[2, 5, 3], [2, 3, 0]]
    assert out["attention_mask"].tolist() == [[True, True, True], [True, True, False]]
    assert out["input_ids"].dtype == torch.long and out["attention_mask"].dtype == torch.bool


def test_pad_batch_truncates_keeping_sep_and_rounds_up() -> None:
    out = pad_batch([[2, 7, 7, 7, 7, 3], [2, 3]], pad_id=0, max_len=4, sep_id=3)
    assert out["input_ids"].tolist() == [[2, 7, 7, 3], [2, 3, 0, 0]]
    assert pad_batch([[1, 2, 3]], pad_id=0, multiple_of=8)["input_ids"].shape == (1, 8)
    assert pad_batch([[1, 2, 3]], pad_id=0, max_len=6, multiple_of=8)["input_ids"].shape == (1, 6)
    assert pad_batch([[1]], pad_id=0, max_len=5, pad_to_max_len=True)["input_ids"].shape == (1, 5)
    with pytest.raises(ValueError):
        pad_batch([], pad_id=0)


def test_batch_fixture_has_the_forward_shape(batch: Inputs) -> None:
    assert batch["input_ids"].shape == (8, 64)
    assert batch["attention_mask"].shape == (8, 64)


def test_dynamic_batcher_covers_every_request_once_within_budgets(tokenizer: Tokenizer, requests: list[str]) -> None:
    ids = tokenizer.encode_batch(requests, max_len=128)
    batcher = DynamicBatcher(pad_id=tokenizer.pad_id, max_batch_size=8, max_tokens=640, max_len=128)
    batches = batcher.batches(ids)
    assert sorted(i for b in batches for i in b.indices) == list(range(len(requests)))
    for b in batches:
        rows, width = b.shape
        assert rows <= 8 and rows * width <= 640
        assert width % 8 == 0 or width == 128
    # Grouping by length wastes less than padding everything to the longest request.
    naive = pad_batch(ids, pad_id=tokenizer.pad_id, max_len=128)["attention_mask"]
    naive_waste = 1 - float(naive.sum()) / naive.numel()
    waste = sum(b.padding_fraction * b.inputs["attention_mask"].numel() for b in batches)
    assert waste / sum(b.inputs["attention_mask"].numel() for b in batches) < naive_waste


def test_dynamic_batcher_scatter_restores_request_order() -> None:
    batcher = DynamicBatcher(pad_id=0, max_batch_size=2, max_tokens=64, max_len=8, multiple_of=None)
    seqs = [[1] * n for n in (5, 1, 3, 2)]
    batches = batcher.batches(seqs)
    outputs = [b.inputs["attention_mask"].sum(dim=1) for b in batches]
    assert DynamicBatcher.scatter(batches, outputs).tolist() == [5, 1, 3, 2]


# --- model -------------------------------------------------------------------------------


def test_model_output_shape_and_eval_mode(model: EncoderClassifier, batch: Inputs) -> None:
    assert not model.training
    with torch.inference_mode():
        logits = model(**batch)
    assert logits.shape == (8, len(LABELS))
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_model_is_deterministic_per_seed(tokenizer: Tokenizer, model: EncoderClassifier, batch: Inputs) -> None:
    rng_before = torch.random.get_rng_state()
    again = build_model(tiny(tokenizer.vocab_size, seed=0))
    other = build_model(tiny(tokenizer.vocab_size, seed=1))
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # building does not touch the global RNG
    with torch.inference_mode():
        a, b, c = model(**batch), again(**batch), other(**batch)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_padding_does_not_change_a_sequence_logits(tokenizer: Tokenizer, model: EncoderClassifier) -> None:
    short = tokenizer.encode("my laptop arrived broken")
    long = tokenizer.encode("please cancel the order, the package is missing and the invoice is wrong")
    padded = pad_batch([short, long], pad_id=tokenizer.pad_id)
    alone = pad_batch([short], pad_id=tokenizer.pad_id)
    with torch.inference_mode():
        together = model(**padded)
        single = model(**alone)
    torch.testing.assert_close(together[0], single[0], rtol=1e-4, atol=1e-5)


def test_model_rejects_too_long_input(model: EncoderClassifier) -> None:
    too_long = torch.zeros((1, model.config.max_len + 1), dtype=torch.long)
    with pytest.raises(ValueError, match="max_len"):
        model(too_long)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="divisible"):
        tiny(100, d_model=130, n_heads=4)
    with pytest.raises(ValueError, match="special tokens"):
        tiny(2)


# --- pipeline ----------------------------------------------------------------------------


def test_pipeline_call_matches_batched_prediction(pipeline: InferencePipeline, requests: list[str]) -> None:
    direct = pipeline(requests[:12])
    batched = pipeline.predict_batched(requests[:12], max_batch_size=4)
    assert [p.labels for p in direct] == [p.labels for p in batched]
    for d, b in zip(direct, batched, strict=True):
        assert d.scores == pytest.approx(b.scores, abs=1e-5)


def test_device_resolution_is_honest() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unsupported device"):
        resolve_device("mps")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            resolve_device("cuda")


def test_pipeline_validates_its_arguments(tokenizer: Tokenizer, model: EncoderClassifier) -> None:
    with pytest.raises(ValueError, match="max_len"):
        InferencePipeline(tokenizer, model, max_len=model.config.max_len + 1)
    with pytest.raises(ValueError, match="top_k"):
        InferencePipeline(tokenizer, model, top_k=len(LABELS) + 1)
