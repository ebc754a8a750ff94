"""A repository map for the planner: the definitions that matter most, grouped by file, cut to a token budget.

Why: the planner splits a change across lanes before anyone reads code. A flat
file list says where files are, not what they hold or how they depend on each
other. Here files are ranked by a personalised PageRank over "file A references
a name that file B defines", biased toward the files and names the task
mentions; each file's rank flows to the definitions it references, and the best
definitions are shown, grouped by file, as many as fit the budget. The arithmetic
is done on arrays, in reposwarm/intel/ranking.py.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from reposwarm.intel.symbols import Definition, RefCount, SymbolIndex, SymbolRows, language_of

if TYPE_CHECKING:
    from reposwarm.intel import ranking

MAX_DEFINERS = 64  # a name defined in more files than this says nothing about which one is meant
HIDDEN_KINDS = frozenset({"field"})  # too fine-grained for a map
STOPWORDS = frozenset("the and for with from into that this then than when where which should would could "
                      "make also have more test tests file files code add new use all not are".split())
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATHISH = re.compile(r"[\w.$/-]+")
_SPLIT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _family(path: str) -> str:
    """Languages that can reference each other's definitions (a Python call never means a Go function)."""
    lang = language_of(path) or ""
    return "js" if lang in ("typescript", "tsx", "javascript") else lang


def _words(name: str) -> set[str]:
    """Lower-case words of an identifier: parseOrderTotal, parse_order_total -> parse, order, total."""
    return {w.lower() for w in _SPLIT.findall(name)}


def _has_upper(text: str) -> bool:
    if text.isascii():
        return text.lower() != text  # (lower() changes exactly the upper-case ASCII letters)
    return any(c.isupper() for c in text)


class Focus:
    """What the task text mentions: identifiers, plain words, files and folders."""

    def __init__(self, text: str, paths: set[str]) -> None:
        by_base: dict[str, list[str]] = defaultdict(list)
        for path in paths:
            by_base[path.rsplit("/", 1)[-1]].append(path)
        raw = _PATHISH.findall(text)
        tokens = {t.strip(".-`'\",:;()") for t in raw} - {""}
        pathlike = {t for t in tokens if "/" in t or t in by_base}
        self.files = {p for t in pathlike for p in ([t] if t in paths else by_base.get(t, []))}
        tails = tuple("/" + t for t in pathlike if "/" in t and t not in paths)  # "src/main.rs" of a longer path
        self.files |= {p for p in paths if tails and p.endswith(tails)}
        folders = [t.rstrip("/") + "/" for t in pathlike if "/" in t and t not in paths]
        self.folder_files = {p for p in paths for f in folders if p.startswith(f)} - self.files
        # identifiers, but not the words of the paths just read ("geometry" of geometry.py is no name)
        prose = " ".join(t for t in raw if t.strip(".-`'\",:;()") not in pathlike)
        self.names = {n for n in _WORD.findall(prose) if len(n) >= 3 and n.lower() not in STOPWORDS}
        self.lower = {n.lower() for n in self.names}
        self.words = {w for n in self.names for w in _words(n) if len(w) >= 4 and w not in STOPWORDS}
        # a name's words are ASCII pieces of it: one of them is a focus word only if name.lower() holds that word
        self._hint = re.compile("|".join(map(re.escape, sorted(self.words)))).search if self.words else None

    def weight(self, name: str) -> float:
        """How much a reference to `name` says about relevance to the task (asked of every name referenced)."""
        mul = 1.0
        lower = name.lower()
        if name in self.names or lower in self.lower:
            mul *= 10
        elif self._hint is not None and self._hint(lower) and self.words & _words(name):
            mul *= 3
        if len(name) >= 8 and ("_" in name.strip("_") or _has_upper(name[1:])):
            mul *= 3  # long, compound names are specific
        if name.startswith("_"):
            mul *= 0.1
        return mul


def rank_definitions(defs: list[Definition], refs: list[RefCount], focus_text: str = "",
                     limit: int | None = None) -> list[Definition]:
    """Definitions, most relevant first: focus files' own, then named ones, then by the rank flowing to them
    (a personalised PageRank over "file A references a name file B defines"). With a limit, only the first
    `limit` of them (a map shows a few hundred of a large repository's 650,000). Ties go by path, line, name."""
    from reposwarm.intel import ranking  # imported when used: numpy costs the worker's start 0.1 s

    return ranking.ranked(ranking.table_of_lists(defs, refs), focus_text, limit)


def rank_rows(rows: SymbolRows, focus_text: str = "", limit: int | None = None,
              readable: Callable[[str], bool] | None = None) -> list[Definition]:
    """rank_definitions of the index's rows (SymbolIndex.rows) as defs_and_refs gives them, less the files
    `readable` refuses, without building a Definition for each of them."""
    from reposwarm.intel import ranking

    return ranking.ranked(ranking.table_of_rows(rows, readable), focus_text, limit)


def render(ranked: list[Definition]) -> str:
    """`path:` then `  line: kind name` lines; files in order of their best definition, lines in file order."""
    by_file: dict[str, list[Definition]] = {}
    for d in ranked:
        by_file.setdefault(d.path, []).append(d)
    out = []
    for path, items in by_file.items():
        out.append(f"{path}:")
        out += [f"  {d.line}: {d.kind} {d.name}" for d in sorted(items, key=lambda d: (d.line, d.name))]
    return "\n".join(out)


def fit(ranked: list[Definition], budget_tokens: int) -> str:
    """The longest prefix of the ranking whose rendering fits the budget (tokens ~ characters / 4)."""
    limit = budget_tokens * 4
    lo, hi = 0, min(len(ranked), max(0, budget_tokens))  # every line costs at least one token
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(render(ranked[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return render(ranked[:lo])


def repo_map(repo_path: str | Path, rev: str, *, budget_tokens: int, focus_text: str = "",
             readable: Callable[[str], bool] | None = None, db_path: str | Path | None = None,
             progress: Callable[[str], None] | None = None) -> str:
    """The map of a revision, within budget_tokens; files and identifiers in focus_text rank first. `progress`
    hears how the work goes (a first index of a large repository takes minutes)."""
    with SymbolIndex(repo_path, db_path) as index:
        rows = index.rows(rev, progress)
    return map_of_rows(rows, budget_tokens=budget_tokens, focus_text=focus_text, readable=readable,
                       progress=progress)


def map_of_rows(rows: SymbolRows, *, budget_tokens: int, focus_text: str = "",
                readable: Callable[[str], bool] | None = None, progress: Callable[[str], None] | None = None) -> str:
    """repo_map of rows the index gave already (SymbolIndex.rows)."""
    from reposwarm.intel import ranking

    return map_of_table(ranking.table_of_rows(rows, readable), budget_tokens=budget_tokens, focus_text=focus_text,
                        progress=progress)


def map_of_table(table: ranking.Table, *, budget_tokens: int, focus_text: str = "",
                 progress: Callable[[str], None] | None = None) -> str:
    """repo_map of the rows as the ranking's table (ranking.table_of_rows: the survey reads the same)."""
    from reposwarm.intel import ranking

    if progress:
        progress(f"ranking {len(table.def_path):,} definitions for the repository map")
    # fit shows at most budget_tokens definitions (each line costs a token or more)
    return fit(ranking.ranked(table, focus_text, max(0, budget_tokens)), budget_tokens)
