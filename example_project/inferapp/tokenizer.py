"""A word-piece tokenizer in pure Python: turns request texts into token ids for the model.

The vocabulary is built deterministically from a small embedded corpus: special tokens,
single characters (so any ASCII word can be spelled), the corpus's words and its frequent
word-initial and word-continuing pieces. Encoding lowercases, splits on whitespace and
punctuation, then matches each word greedily longest-first against the vocabulary; a
character nothing matches becomes [UNK]. No cache: every call does the full work, which is
what makes tokenizing a batch a real, pure-Python CPU cost.
"""

from __future__ import annotations

import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

PAD, UNK, CLS, SEP = "[PAD]", "[UNK]", "[CLS]", "[SEP]"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, CLS, SEP)
CONTINUATION = "##"

CORPUS = """
Thank you for contacting customer support. We received your message about the order and we are
sorry that the item arrived damaged. Our team will review the payment and process a refund within
five business days. If the package is missing, please check the tracking number on the delivery
page. The shipping address can be updated from your account settings before the order is shipped.
Customers often ask how to reset a password: open the login page, choose forgot password and follow
the instructions in the email we send. Billing questions about a charge, an invoice or a
subscription plan are handled by the billing team. Technical problems after a software update,
such as a slow laptop, a noisy keyboard, a broken charger or a monitor that stopped working, are
handled by the technical team. Returns are accepted within thirty days; the product must be in
its original box. We replace defective products and cancel orders that have not been shipped yet.
Reviews say the service is great, the delivery was fast and the support was helpful, but some
customers found the instructions confusing and the prices expensive. Please describe the problem,
the product, the order number and the date, and we will update you as soon as possible. Thanks for
your patience and have a nice day. Processing an order usually takes one or two days; tracking
updates appear when the carrier scans the package. Your account, your orders and your invoices are
always available online. We explain every charge on the invoice and we close accounts on request.
The router, the printer, the camera and the speaker come with a one year warranty; the tablet, the
phone and the watch with two years. Working, worked, works, replaced, replacing, charged, charging,
updated, updating, shipped, shipping, delivered, delivering, reviewed, reviewing, returned, returning.
Hello, could you tell me why my payment was declined? I tried my card twice this morning and again
yesterday. The headset, the webcam, the mouse and the desk lamp in my last order were all still
sealed. My new phone case is surprisingly cheap but it feels reliable. After the latest firmware
update the device keeps restarting, and the screen goes black almost every hour. I would like to
change my plan, upgrade my storage and download last month's statement. Where is my parcel? The
courier said it would come on Monday, but nothing arrived and nobody called. The quality of the
backpack is excellent and the colour matches the pictures. Unfortunately the wrong size was sent
and the replacement is out of stock. Can I get a discount code for the inconvenience? Kind regards.
"""


def _is_punctuation(ch: str) -> bool:
    if ch in string.punctuation:
        return True
    cat = unicodedata.category(ch)
    return cat.startswith("P") or cat.startswith("S")


def normalize(text: str) -> str:
    """Lowercase and strip accents ("Léa" -> "lea"), as uncased BERT-style tokenizers do."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")


def pre_tokenize(text: str) -> list[str]:
    """Normalise and split into words: whitespace separates, each punctuation mark stands alone."""
    words: list[str] = []
    current: list[str] = []
    for ch in normalize(text):
        if ch.isspace():
            if current:
                words.append("".join(current))
                current = []
        elif _is_punctuation(ch):
            if current:
                words.append("".join(current))
                current = []
            words.append(ch)
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


def build_vocab(corpus: str = CORPUS, max_pieces: int = 3000, min_count: int = 1) -> list[str]:
    """Build the vocabulary, in id order, from a corpus; the same corpus always gives the same list."""
    vocab: list[str] = list(SPECIAL_TOKENS)
    seen = set(vocab)

    def add(token: str) -> None:
        if token not in seen:
            seen.add(token)
            vocab.append(token)

    chars = string.ascii_lowercase + string.digits
    for ch in chars + string.punctuation:
        add(ch)
    for ch in chars:
        add(CONTINUATION + ch)

    words = Counter(w for w in pre_tokenize(corpus) if w.isalnum())
    for word, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])):
        add(word)

    # Frequent pieces, weighted by length: they let unseen words ("headphones") split
    # into a few pieces instead of one token per character.
    pieces: Counter[str] = Counter()
    for word, count in words.items():
        for i in range(2, len(word)):
            pieces[word[:i]] += count
            pieces[CONTINUATION + word[-i:]] += count
    ranked = sorted(
        (p for p, c in pieces.items() if c >= min_count),
        key=lambda p: (-pieces[p] * len(p.removeprefix(CONTINUATION)), p),
    )
    for piece in ranked[:max_pieces]:
        add(piece)
    return vocab


class Tokenizer:
    """Greedy longest-match word-piece tokenizer over a fixed vocabulary."""

    def __init__(self, vocab: Sequence[str] | None = None) -> None:
        tokens = list(vocab) if vocab is not None else build_vocab()
        missing = [t for t in SPECIAL_TOKENS if t not in tokens]
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {missing}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("vocabulary has duplicate tokens")
        self.id_to_token: list[str] = tokens
        self.token_to_id: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        self.pad_id = self.token_to_id[PAD]
        self.unk_id = self.token_to_id[UNK]
        self.cls_id = self.token_to_id[CLS]
        self.sep_id = self.token_to_id[SEP]
        self._max_piece = max(len(t.removeprefix(CONTINUATION)) for t in tokens if t not in SPECIAL_TOKENS)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def _word_ids(self, word: str, out: list[int]) -> None:
        vocab = self.token_to_id
        n = len(word)
        start = 0
        while start < n:
            end = min(n, start + self._max_piece)
            found = -1
            while end > start:
                piece = word[start:end] if start == 0 else CONTINUATION + word[start:end]
                found = vocab.get(piece, -1)
                if found >= 0:
                    break
                end -= 1
            if found < 0:
                # Character fallback: nothing in the vocabulary starts with this character.
                out.append(self.unk_id)
                start += 1
            else:
                out.append(found)
                start = end

    def encode(self, text: str, max_len: int | None = None, add_special_tokens: bool = True) -> list[int]:
        """Token ids of one text; with `max_len`, truncated so that [SEP] stays last."""
        ids: list[int] = []
        for word in pre_tokenize(text):
            self._word_ids(word, ids)
        if add_special_tokens:
            if max_len is not None:
                if max_len < 2:
                    raise ValueError(f"max_len must leave room for [CLS] and [SEP], got {max_len}")
                ids = ids[: max_len - 2]
            return [self.cls_id, *ids, self.sep_id]
        return ids if max_len is None else ids[:max_len]

    def encode_batch(self, texts: Iterable[str], max_len: int | None = None) -> list[list[int]]:
        """Token ids of every text, in order."""
        return [self.encode(t, max_len=max_len) for t in texts]

    def tokenize(self, text: str) -> list[str]:
        """The pieces of a text as strings (no special tokens), for inspection and tests."""
        return [self.id_to_token[i] for i in self.encode(text, add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text from token ids: continuation pieces join their word, punctuation its left neighbour."""
        out: list[str] = []
        for i in ids:
            tok = self.id_to_token[int(i)]
            if skip_special_tokens and tok in SPECIAL_TOKENS and tok != UNK:
                continue
            if tok.startswith(CONTINUATION) and out:
                out[-1] += tok[len(CONTINUATION) :]
            elif out and len(tok) == 1 and tok in ".,!?;:)" and not tok.isalnum():
                out[-1] += tok
            else:
                out.append(tok)
        return " ".join(out)
