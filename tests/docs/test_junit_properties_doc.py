"""docs/reports.md's JUnit table names every property the JUnit XML is written with (reporters/junit.py).

The table is what a CI job charting the properties goes by: the comparison's `inferscope.regression.*` and the A/B
run's `inferscope.ab.*` were written but missing from it (ci.md and ab.md named them; 2026-11-29). A name is in the
table whole (`inferscope.rounds`) or as a sibling of one before it (`inferscope.latency_ms.median`, `.p90`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## JUnit XML properties"


def _section() -> str:
    text = (ROOT / "docs" / "reports.md").read_text()
    return text[text.index(HEADING) :].split("\n## ", 1)[0]


def test_every_junit_property_is_in_the_table() -> None:
    source = (ROOT / "pytest_inferscope" / "reporters" / "junit.py").read_text()
    names = set(re.findall(r'f?"(inferscope\.[^"]+)"', source))
    assert "inferscope.regression.verdict" in names and "inferscope.rounds" in names  # the scan finds them
    section = _section()
    missing = []
    for name in sorted(names):
        name = re.sub(r"\{[^}]*?(\w+)\}", lambda m: f"<{m.group(1)}>", name)
        parent, _, last = name.rpartition(".")
        whole = f"`{name}`" in section
        sibling = f"`.{last}`" in section and f"`{parent}." in section
        if not (whole or sibling):
            missing.append(name)
    assert not missing, f"JUnit properties written but not in docs/reports.md's table: {missing}"
