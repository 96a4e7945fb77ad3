"""Every relative link in the README and the docs leads somewhere: the file exists and, for ``file.md#anchor``, the file has
a heading whose GitHub anchor is ``anchor`` (lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``, a repeated
heading numbered ``-1``, ``-2``...)."""

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of ``page``'s headings (outside code blocks)."""
    seen: Counter = Counter()
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", text.lower().replace("`", "")).replace(" ", "-")
        out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return out


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(FENCE.sub("", page.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: lead outside the repository


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        path, _, anchor = unquote(target).partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_anchor_rule_follows_github():
    page = ROOT / "docs" / "specdec.md"
    assert "measured-side-by-side-with-hugging-faces-speculative-decoding" in anchors(page)
    assert "the-serving-policy-warmthroughputucb-policiesspeculative_servingpy" in anchors(page)
