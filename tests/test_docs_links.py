"""Every relative link in README.md and docs/*.md points to a file that exists and, with a
``#fragment``, to a heading (or an HTML anchor) of that file as GitHub names it; every docs page is
reachable from the README. The checker is shown to catch a missing file and a missing anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:...


def prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (links and headings there are code)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and emphasis reduced to their words, code
    spans to their content), lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a page: each heading's slug (repeats numbered ``-1``, ``-2`` as GitHub does)
    and each HTML ``<a name=...>`` / ``<a id=...>``."""
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for m in HEADING.finditer(FENCE.sub("", text)):
        s = slug(m.group(2))
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def links(text: str) -> list[str]:
    body = prose(text)
    return LINK.findall(body) + REFERENCE.findall(body)


def broken(page: Path, text: str | None = None) -> list[str]:
    """The relative links of ``page`` (its ``text``, default: the file) that resolve to no file,
    or to no anchor of the file they name."""
    text = page.read_text() if text is None else text
    bad = []
    for target in links(text):
        if EXTERNAL.match(target):
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md":
            have = anchors(text if dest == page else dest.read_text())
            if fragment.lower() not in have:
                bad.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert not broken(page), f"{page.relative_to(ROOT)}: {broken(page)}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links((ROOT / "README.md").read_text())
              if not EXTERNAL.match(t) and t.partition("#")[0]}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link to: {orphans}"


def test_the_checker_catches_a_missing_file_and_a_missing_anchor():
    readme = ROOT / "README.md"
    text = ("# Title\n\n## Two words\n\n[ok](#two-words) [ok](docs/setup.md#three-ways-in) "
            "[web](https://example.org/x) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n"
            "[gone](docs/no-such-page.md) [lost](#no-such-heading) "
            "[lost too](docs/setup.md#no-such-heading)\n")
    assert broken(readme, text) == ["docs/no-such-page.md: no such file",
                                    "#no-such-heading: no heading #no-such-heading in README.md",
                                    "docs/setup.md#no-such-heading: no heading #no-such-heading in "
                                    "docs/setup.md"]


def test_slugs_follow_github():
    assert slug("The evidence, in depth") == "the-evidence-in-depth"
    assert slug("Today's hand-written branches: could generic functionalization delete them?") == (
        "todays-hand-written-branches-could-generic-functionalization-delete-them")
    assert slug("Formulas as private operators (`torch.library`)") == "formulas-as-private-operators-torchlibrary"
    assert slug("How bad is the overhead, really?") == "how-bad-is-the-overhead-really"
    assert slug("A torch bug `traced` works around") == "a-torch-bug-traced-works-around"
    assert anchors("## A\n\n## A\n\n```\n## A\n```\n") == {"a", "a-1"}
