"""Who owns what, as the repository's CODEOWNERS says: the owners of each package's folder.

Why: a lane whose slice crosses an owner boundary makes one change that two teams must review; the starting lanes
keep each lane inside one owner area when they can. Read as GitHub reads the file: the first of
.github/CODEOWNERS, CODEOWNERS and docs/CODEOWNERS; `pattern owner...` lines, gitignore-style patterns (a pattern
with no "/" but a trailing one matches anywhere, a leading "/" anchors it at the root, "dir/" covers what is below),
the last matching line wins, and a line with no owners leaves its paths unowned.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pathspec

LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
SAMPLE = 200  # files per package whose owners are looked up: a folder's owners are its files' most common ones


@dataclass(frozen=True)
class Rule:
    pattern: str
    owners: tuple[str, ...]
    line: int
    spec: pathspec.PathSpec


class CodeOwners:
    """The rules of one CODEOWNERS file; `owners(path)` is what GitHub would request reviews from."""

    def __init__(self, text: str, where: str = "CODEOWNERS") -> None:
        self.where = where
        self.rules: list[Rule] = []
        self.problems: list[str] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            words = _split(line)
            cut = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))  # a comment after
            pattern, owners = words[0], tuple(words[1:cut])
            if pattern.startswith("!") or "[" in pattern:
                self.problems.append(f"{where}:{number}: {pattern!r}: GitHub does not read ! or [ ] patterns "
                                     "(line left out)")
                continue
            try:
                spec = pathspec.PathSpec.from_lines("gitwildmatch", [pattern])
            except (ValueError, TypeError):
                self.problems.append(f"{where}:{number}: {pattern!r} is not a pattern (line left out)")
                continue
            self.rules.append(Rule(pattern, owners, number, spec))

    def owners(self, path: str) -> tuple[str, ...]:
        for rule in reversed(self.rules):  # the last matching rule wins
            if rule.spec.match_file(path):
                return rule.owners
        return ()


def _split(line: str) -> list[str]:
    """A line's words; a "\\ " in a pattern is a space of the path."""
    words, word, i = [], "", 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            word += line[i + 1]
            i += 2
            continue
        if ch.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += ch
        i += 1
    if word:
        words.append(word)
    return words


def find(files: Iterable[str], read: Callable[[str], str | None]) -> CodeOwners | None:
    """The CODEOWNERS GitHub would read (the first of LOCATIONS the tree has), or None."""
    names = set(files)
    for where in LOCATIONS:
        if where in names:
            return CodeOwners(read(where) or "", where)
    return None


def folder_owners(codeowners: CodeOwners, files: Sequence[str]) -> list[str]:
    """A package's owners: the owners of most of its files (sampled evenly, at most SAMPLE); ties go to the
    set that sorts first, so a tree always gets the same answer."""
    if not files:
        return []
    step = max(1, len(files) // SAMPLE)
    counts = Counter(codeowners.owners(path) for path in sorted(files)[::step])
    return list(min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0])


def package_owners(codeowners: CodeOwners | None, own_files: dict[str, list[str]]) -> dict[str, list[str]]:
    """Owners by package folder, from each package's own files; a package with no file of its own is asked by its
    folder ("path/x")."""
    if codeowners is None:
        return {path: [] for path in own_files}
    out = {}
    for path, files in own_files.items():
        out[path] = folder_owners(codeowners, files or [posixpath.join(path, "x")])
    return out
