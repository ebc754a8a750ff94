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

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from reposwarm.symbols.index import Definition, RefCount, SymbolIndex, SymbolRows

if TYPE_CHECKING:
    from reposwarm.intel import ranking

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
