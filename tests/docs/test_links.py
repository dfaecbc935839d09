"""Every link between the project's Markdown pages leads somewhere: the file exists, and an anchor (`page.md#a-heading`)
is a heading of that page as GitHub makes anchors of headings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "native" / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/*.md"),
     ROOT / "example_project" / "README.md", *ROOT.glob("tests/data/*/README.md")]
)  # fmt: skip
LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` on
    repeats; headings inside code blocks are not headings."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.*)$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_anchors_are_made_as_github_makes_them() -> None:
    assert {"ab-against-the-base-branch-recommended-for-pull-requests", "xdist"} <= anchors(ROOT / "docs" / "ci.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_a_page_of_the_project_leads_somewhere(page: Path) -> None:
    broken = []
    for target, anchor in LINK.findall(FENCE.sub("", page.read_text())):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}#{anchor}: no such heading in {path.name}")
    assert not broken, broken
