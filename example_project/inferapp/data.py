"""Deterministic request texts: what the service would receive from its users.

Requests are customer-support messages assembled from sentence templates and word
lists with a seeded RNG, so every run (and every machine) sees the same inputs. A few
requests carry accented letters, emoji or order numbers, as real traffic does; the
tokenizer maps what it does not know to [UNK].
"""

from __future__ import annotations

import random

LABELS: tuple[str, ...] = ("billing", "shipping", "technical", "account", "returns", "feedback")

_PRODUCTS = (
    "laptop",
    "headphones",
    "keyboard",
    "monitor",
    "charger",
    "phone case",
    "router",
    "camera",
    "smart watch",
    "printer",
    "speaker",
    "tablet",
    "mouse",
    "webcam",
    "desk lamp",
    "backpack",
)
_ADJECTIVES = (
    "broken",
    "damaged",
    "late",
    "wrong",
    "excellent",
    "slow",
    "noisy",
    "perfect",
    "missing",
    "defective",
    "great",
    "confusing",
    "expensive",
    "cheap",
    "reliable",
    "unusable",
)
_ADVERBS = ("really", "very", "extremely", "quite", "surprisingly", "completely", "almost", "still")
_TIMES = ("yesterday", "last week", "two days ago", "this morning", "on monday", "a month ago", "today")
_ACTIONS = (
    "refund my payment",
    "replace the item",
    "cancel the order",
    "update my address",
    "reset my password",
    "change the delivery date",
    "close my account",
    "explain the charge",
    "send a new invoice",
    "track the package",
    "fix the update",
    "upgrade my plan",
)
_NAMES = ("Anna", "Marco", "Léa", "Jonas", "Priya", "Chen", "Zoë", "Omar", "Sofia", "Björn")

_TEMPLATES = (
    "I ordered a {product} {time} and it arrived {adverb} {adj}.",
    "My {product} is {adverb} {adj}, can you {action}?",
    "Please {action} for order #{order}.",
    "Hello, this is {name}: the {product} stopped working {time}.",
    "Why was I charged twice for the {product}? Please {action}!",
    "The tracking page says delivered {time}, but the {product} is {adj}.",
    "Great service, the {product} is {adj} and shipping was fast.",
    "I cannot log in since {time}; I need you to {action}.",
    "After the latest update my {product} became {adverb} {adj}.",
    "Is it possible to {action}? The {product} was {adj} when I opened the box.",
    "Thanks {name}, the replacement {product} works {adverb} well :)",
    "Order {order} still shows as processing, could you {action} please?",
    "The invoice for my {product} lists the wrong amount (${price}).",
    "I would like to return the {product}, it is {adj} and {adj2}.",
)
_EXTRAS = (" 👍", " ☹", " café", " naïve", " — thanks", "", "", "", "", "")


def _sentence(rng: random.Random) -> str:
    template = rng.choice(_TEMPLATES)
    return template.format(
        product=rng.choice(_PRODUCTS),
        adj=rng.choice(_ADJECTIVES),
        adj2=rng.choice(_ADJECTIVES),
        adverb=rng.choice(_ADVERBS),
        time=rng.choice(_TIMES),
        action=rng.choice(_ACTIONS),
        name=rng.choice(_NAMES),
        order=rng.randrange(10_000, 99_999),
        price=f"{rng.randrange(5, 2_000)}.{rng.randrange(100):02d}",
    )


def make_requests(n: int, seed: int = 0, min_sentences: int = 3, max_sentences: int = 8) -> list[str]:
    """Build `n` support messages of a few sentences each, identical for the same seed."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_sentences <= max_sentences:
        raise ValueError(f"need 1 <= min_sentences <= max_sentences, got {min_sentences}, {max_sentences}")
    rng = random.Random(seed)
    requests = []
    for _ in range(n):
        k = rng.randint(min_sentences, max_sentences)
        text = " ".join(_sentence(rng) for _ in range(k)) + rng.choice(_EXTRAS)
        requests.append(text)
    return requests
