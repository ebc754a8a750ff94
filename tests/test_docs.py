"""The README is the front door and docs/ holds the rest: every link between them leads somewhere (a file that
exists, a heading that is there), and the README stays short enough to read in a sitting."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_LINES = 300  # prose, tables and commands a newcomer reads in a sitting: the deep material lives in docs/


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as dashes."""
    out = set()
    for heading in re.findall(r"^#+\s+(.*)$", markdown, re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_link_between_the_readme_and_docs_leads_somewhere() -> None:
    broken = []
    for page in pages():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    headings = re.findall(r"^## (.*)$", readme, re.M)
    # what it is (the intro), the quick start, trying it on your own repository before running it there
    assert headings[:3] == ["Quick start", "Try it on your own repository, offline", "Running it on your repository"]
    for page in (ROOT / "docs").glob("*.md"):  # every page is reachable from the front door
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"
