"""README and docs/ stand alone: every relative link resolves inside the repository (files and
#anchors of Markdown headings), and nothing points at documents outside it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def _anchors(page: Path) -> set[str]:
    """GitHub's heading slugs: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for heading in re.findall(r"^#+\s+(.*)$", FENCE.sub("", page.read_text()), re.MULTILINE):
        text = re.sub(r"[`*_]", "", heading.strip().lower())
        anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def _resolves(page: Path, link: str) -> bool:
    path, _, anchor = link.partition("#")
    target = (page.parent / path).resolve() if path else page
    if not target.is_relative_to(ROOT) or not target.exists():
        return False
    return not anchor or target.suffix != ".md" or anchor in _anchors(target)


def _relative(link: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", link) and not link.startswith("//")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves_inside_the_repository(page):
    broken = [link for link in filter(_relative, _links(page)) if not _resolves(page, link)]
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_it_names_no_document_outside_the_repository(page):
    text = page.read_text()
    assert not re.search(r"\.\./shared|SPEC\.md|CONTRACT\.md", text)


def test_it_checks_the_guide_pages():
    names = {page.name for page in PAGES}
    assert {"README.md", "api.md", "webhooks.md", "authentication.md", "operations.md"} <= names
