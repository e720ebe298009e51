"""docs/decisions/ is the maintainers' record, one file a subsystem. The repository cites a
decision by its file and heading (`docs/decisions/webhook.md, "Per-request records"`, or a
link's #anchor), so a decision that moves to another file or is renamed takes its references
with it: every one names a file that exists and, where it quotes a heading, one that file has."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

DECISIONS = REPO / "docs" / "decisions"
# A path into docs/decisions, then an #anchor or a quoted heading, which may run onto the next
# line of a paragraph, a docstring or a comment.
CITED = re.compile(r'docs/(decisions(?:/[\w.-]+)?\.md)(?:#([\w-]+)|,\s*"([^"]{1,200})")?')
# A Markdown link, its target relative to the file it is in, with the same tails.
LINKED = re.compile(r'\]\(([\w./-]+\.md)(?:#([\w-]+))?\)(?:,\s*"([^"]{1,200})")?')


def sources() -> list[str]:
    """Every file git tracks, or would: untracked files it does not ignore count too."""
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [name for name in names if (REPO / name).is_file() and not (REPO / name).is_symlink()]


def references() -> list[tuple[str, Path, str | None, str | None]]:
    """(citing file, cited file, anchor, heading) for every reference into docs/decisions."""
    found = []
    for name in sources():
        path = REPO / name
        text = path.read_text(errors="replace")
        for cited, anchor, heading in CITED.findall(text):
            found.append((name, REPO / "docs" / cited, anchor or None, heading or None))
        if name.endswith(".md"):
            for target, anchor, heading in LINKED.findall(text):
                linked = (path.parent / target).resolve()
                if linked == DECISIONS.with_suffix(".md") or DECISIONS in linked.parents:
                    found.append((name, linked, anchor or None, heading or None))
    return found


def plain(text: str) -> str:
    """Text as a heading is compared: one line (comment markers dropped), no code quotes."""
    return " ".join(re.sub(r"\n\s*#?", " ", text).replace("`", "").split())


def headings(path: Path) -> tuple[set[str], set[str]]:
    """A decisions file's Markdown headings, and every heading a reference may quote: those and
    each decision's own, the bold words that open its bullet."""
    text = path.read_text()
    sections = {plain(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    decisions = {plain(h) for h in re.findall(r"^- \*\*(.+?)\*\*", text, re.M | re.S)}
    return sections, sections | decisions


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_every_reference_to_a_decision_names_a_file_and_a_heading_it_has():
    found = references()
    assert len(found) > 10
    assert any(heading for *_, heading in found)
    dangling = []
    for name, cited, anchor, heading in found:
        where = f"{name}: {cited.relative_to(REPO)}"
        if not cited.is_file():
            dangling.append(f"{where} does not exist")
            continue
        sections, quotable = headings(cited)
        if anchor and anchor not in {anchor_of(section) for section in sections}:
            dangling.append(f"{where} has no heading #{anchor}")
        if heading and not any(h.startswith(plain(heading)) for h in quotable):
            dangling.append(f'{where} has no heading "{plain(heading)}"')
    assert dangling == []


def test_the_index_lists_every_decisions_file():
    index = (DECISIONS / "README.md").read_text()
    listed = set(re.findall(r"^- \[[\w.-]+\]\(([\w.-]+\.md)\)", index, re.M))
    files = {path.name for path in DECISIONS.glob("*.md")} - {"README.md"}
    assert listed == files
