"""A headless Chromium for the browser tests.

Without one, the tests skip and say why (they fail instead with INFERSCOPE_BROWSER=required); a
Chromium that is found but does not start is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from chromium_cdp import Browser, BrowserError, find_chromium

INSTALL = "install it with `apt-get install -y chromium` (Debian/Ubuntu) or point $INFERSCOPE_CHROMIUM at a Chromium"


def _unavailable(reason: str) -> None:
    if os.environ.get("INFERSCOPE_BROWSER") == "required":
        pytest.fail(f"INFERSCOPE_BROWSER=required but the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"browser test: {reason} (set INFERSCOPE_BROWSER=required to make this a failure)")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    exe = find_chromium()
    if exe is None:
        where = os.environ.get("INFERSCOPE_CHROMIUM")
        _unavailable(
            f"$INFERSCOPE_CHROMIUM={where!r} is not an executable file; {INSTALL}"
            if where
            else f"no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH); {INSTALL}"
        )
    try:
        b = Browser(str(exe))
    except (BrowserError, OSError) as e:  # found but broken: a failure, not a skip
        pytest.fail(f"{exe} was found but did not start, so the HTML reports cannot be tested: {e}", pytrace=False)
    try:
        yield b
    finally:
        b.close()
