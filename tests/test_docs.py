"""Every link in the README and docs/ points at a file that exists, and at a heading it holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The page without its code: links and headings in code are not links or headings."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes for a page: lower case, punctuation dropped, spaces
    to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The links of `page` that lead nowhere (or out of `root`), each as `target: why`."""
    out = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(root) or not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            out.append(f"{target}: no such heading")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_leads_somewhere(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_finds_a_broken_link(tmp_path: Path) -> None:
    page = REPO / "docs" / "benchmarks.md"
    assert "the-demo-make-run" in anchors(page)
    assert "the-sinks-write-speed" in anchors(page)
    bad = tmp_path / "bad.md"
    bad.write_text("[a](nowhere.md) [b](#nothing) `[c](in-code.md)`\n\n# Here\n[d](#here)\n")
    assert broken_links(bad, root=tmp_path) == [
        "nowhere.md: no such file",
        "#nothing: no such heading",
    ]
