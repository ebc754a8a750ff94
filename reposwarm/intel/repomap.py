"""A repository map for the planner: the definitions that matter most, grouped by file, cut to a token budget.

Why: the planner splits a change across lanes before anyone reads code. A flat
file list says where files are, not what they hold or how they depend on each
other. Here files are ranked by a personalised PageRank over "file A references
a name that file B defines", biased toward the files and names the task
mentions; each file's rank flows to the definitions it references, and the best
definitions are shown, grouped by file, as many as fit the budget.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from reposwarm.intel.symbols import Definition, RefCount, SymbolIndex, language_of

if TYPE_CHECKING:
    import networkx as nx

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

    def weight(self, name: str) -> float:
        """How much a reference to `name` says about relevance to the task."""
        mul = 1.0
        if name in self.names or name.lower() in self.lower:
            mul *= 10
        elif self.words & _words(name):
            mul *= 3
        if len(name) >= 8 and ("_" in name.strip("_") or any(c.isupper() for c in name[1:])):
            mul *= 3  # long, compound names are specific
        if name.startswith("_"):
            mul *= 0.1
        return mul


def _pagerank(graph: nx.DiGraph, personalization: dict[str, float] | None, alpha: float = 0.85,
              tol: float = 1e-8, max_iter: int = 100) -> dict[str, float]:
    """Weighted personalised PageRank by power iteration (nx.pagerank needs numpy and scipy; this needs neither)."""
    nodes = sorted(graph.nodes)
    if not nodes:
        return {}
    index = {n: i for i, n in enumerate(nodes)}
    size = len(nodes)
    if personalization and sum(personalization.values()) > 0:
        total = sum(personalization.values())
        p = [personalization.get(n, 0.0) / total for n in nodes]
    else:
        p = [1.0 / size] * size
    out: list[list[tuple[int, float]]] = []
    for n in nodes:
        succ = graph.succ[n]
        weight = sum(d.get("weight", 1.0) for d in succ.values())
        out.append([(index[v], d.get("weight", 1.0) / weight) for v, d in succ.items()] if weight > 0 else [])
    x = p[:]
    for _ in range(max_iter):
        new = [0.0] * size
        dangling = 0.0
        for i, edges in enumerate(out):
            if not edges:
                dangling += x[i]
                continue
            share = alpha * x[i]
            for j, w in edges:
                new[j] += share * w
        for j in range(size):
            new[j] += (alpha * dangling + 1 - alpha) * p[j]
        err = sum(abs(a - b) for a, b in zip(new, x, strict=True))
        x = new
        if err < size * tol:
            break
    return dict(zip(nodes, x, strict=True))


def rank_definitions(defs: list[Definition], refs: list[RefCount], focus_text: str = "",
                     limit: int | None = None) -> list[Definition]:
    """Definitions, most relevant first: focus files' own, then named ones, then by the rank flowing to them.
    With a limit, only the first `limit` of them (a map shows a few hundred of a large repository's 650,000)."""
    import networkx as nx  # imported when used: it costs the worker's start 0.2 s

    paths = sorted({d.path for d in defs} | {r.path for r in refs})  # sorted: the same sums in the same order
    focus = Focus(focus_text, set(paths))
    found: dict[str, set[str]] = defaultdict(set)
    for d in defs:
        found[d.name].add(d.path)
    definers = {name: sorted(where) if len(where) > 1 else list(where) for name, where in found.items()}
    flows: dict[str, list[tuple[str, str, float]]] = defaultdict(list)  # referencer -> (definer, name, weight)
    edges: dict[tuple[str, str], float] = defaultdict(float)
    family = {p: _family(p) for p in paths}
    name_weight: dict[str, float] = {}
    for path, name, count in refs:
        where = definers.get(name, ())
        if not where or len(where) > MAX_DEFINERS:
            continue
        if name not in name_weight:  # a name many files define could mean any of them: damped
            name_weight[name] = focus.weight(name) * min(1.0, 4 / len(where))
        weight = name_weight[name] * math.sqrt(count)
        for target in where:
            if target != path and family[target] == family[path]:
                flows[path].append((target, name, weight))
                edges[(path, target)] += weight
    graph = nx.DiGraph()
    graph.add_nodes_from(paths)
    graph.add_weighted_edges_from((a, b, w) for (a, b), w in edges.items())
    # Files the focus names share half of the restart mass, files in folders it names a sixth; the rest
    # is spread over every file, so files the focus does not reach still rank among themselves.
    personal = dict.fromkeys(paths, 1.0)
    for group, share in ((focus.files, 1.0), (focus.folder_files, 0.2)):
        for p in group:
            personal[p] += share * len(paths) / len(group)
    rank = _pagerank(graph, personal)
    score: dict[tuple[str, str], float] = defaultdict(float)
    for source, outgoing in flows.items():
        total = sum(w for _, _, w in outgoing)
        for target, name, w in outgoing:
            score[(target, name)] += rank[source] * w / total
    shown = [d for d in defs if d.kind not in HIDDEN_KINDS]

    def key(d: Definition) -> tuple:
        tier = 0 if d.path in focus.files else 1 if (d.name in focus.names) else 2
        return (tier, -(score[(d.path, d.name)] + 1e-3 * rank.get(d.path, 0.0)), d.path, d.line)

    return sorted(shown, key=key) if limit is None else heapq.nsmallest(limit, shown, key=key)


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
        defs, refs = index.defs_and_refs(rev, progress)
    if readable is not None:
        defs = [d for d in defs if readable(d.path)]
        refs = [r for r in refs if readable(r.path)]
    if progress:
        progress(f"ranking {len(defs):,} definitions for the repository map")
    # fit shows at most budget_tokens definitions (each line costs a token or more)
    return fit(rank_definitions(defs, refs, focus_text, limit=max(0, budget_tokens)), budget_tokens)
