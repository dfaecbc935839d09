"""The reference docs are generated from the code; this fails when they drift apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_markers_and_options_doc_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    current = (ROOT / "docs" / "markers-and-options.md").read_text()
    assert current == gen.render(), "docs/markers-and-options.md is stale: run `python scripts/gen_reference.py`"


def test_every_marker_key_and_option_is_documented() -> None:
    from pytest_inferscope.checks import MARKER_KEYS
    from pytest_inferscope.config import OPTIONS

    text = (ROOT / "docs" / "markers-and-options.md").read_text()
    assert all(f"`{k}`" in text for k in MARKER_KEYS)
    assert all(o.env in text and o.flag in text for o in OPTIONS)
