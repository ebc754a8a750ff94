"""The repository map's ranking on arrays (numpy): a personalised PageRank over "file A references a name file B
defines", biased toward what the task mentions (Focus), and the rank flowing from each file to the definitions it
references (reposwarm/intel/repomap.py draws the map from it; it imports this module when it ranks, since numpy
costs the worker's start 0.1 s).

Why: a 4M-line repository has 650,000 definitions and 380,000 (file, name) references; the same ranking in pure
Python took 9 s with the index warm, most of it building Definitions, a graph and the edges name by name. Here
files and names are integers, edges come from one ragged expansion, and each sum is made in the order the pure-
Python loops made it (bincount and cumsum add in array order), so the ranks are the same to the last bit.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from reposwarm.symbols.index import Definition, RefCount, SymbolRows, language_of

MAX_DEFINERS = 64  # a name defined in more files than this says nothing about which one is meant
HIDDEN_KINDS = frozenset({"field"})  # too fine-grained for a map
STOPWORDS = frozenset("the and for with from into that this then than when where which should would could "
                      "make also have more test tests file files code add new use all not are".split())
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATHISH = re.compile(r"[\w.$/-]+")
_SPLIT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def language_family(path: str) -> str:
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


class Table(NamedTuple):
    """Definitions and references as integer arrays, for the ranking: files by their index in `paths` (sorted:
    the graph's node order), names by their index in `names`."""
    paths: list[str]
    names: list[str]
    name_ids: dict[str, int]
    def_path: np.ndarray  # per definition
    def_name: np.ndarray
    hidden: np.ndarray  # its kind is not shown (HIDDEN_KINDS)
    ref_path: np.ndarray  # per (file, name) referenced, in the order given
    ref_name: np.ndarray
    ref_uses: np.ndarray
    ref_row: np.ndarray  # the row it comes from (one row per blob: a blob at two paths is two references)
    definition: Callable[[int], Definition]  # the i-th definition


def _ints(values: Iterable[int], count: int = -1) -> np.ndarray:
    return np.fromiter(values, np.int64, count)


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values), by a sort (numpy 2's hashing unique is several times slower on 650,000 integers)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def ragged(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items with counts[i] parts each: the item of each part and its place among the item's parts."""
    item = np.repeat(np.arange(len(counts)), counts)
    return item, np.arange(len(item)) - np.repeat(np.cumsum(counts) - counts, counts)


def table_of_lists(defs: list[Definition], refs: list[RefCount]) -> Table:
    """The table of definitions and references as lists (rank_definitions')."""
    paths = sorted({d.path for d in defs} | {r.path for r in refs})
    at = {p: i for i, p in enumerate(paths)}
    name_ids: dict[str, int] = {}
    for name in [*(d.name for d in defs), *(r.name for r in refs)]:
        name_ids.setdefault(name, len(name_ids))
    return Table(paths, list(name_ids), name_ids, _ints((at[d.path] for d in defs), len(defs)),
                 _ints((name_ids[d.name] for d in defs), len(defs)),
                 np.array([d.kind in HIDDEN_KINDS for d in defs], bool), _ints((at[r.path] for r in refs), len(refs)),
                 _ints((name_ids[r.name] for r in refs), len(refs)), _ints((r.uses for r in refs), len(refs)),
                 np.arange(len(refs)), defs.__getitem__)


def table_of_rows(rows: SymbolRows, readable: Callable[[str], bool] | None) -> Table:
    """The index's rows by blob as a table of files, as defs_and_refs and the readable filter would have them:
    references to names no file of the revision defines left out, then the files `readable` refuses."""
    blob_paths, def_rows, ref_rows = rows
    # by column, once (a Python loop over 650,000 rows doing all of it takes a second)
    def_names, def_kinds = [r[2] for r in def_rows], [r[3] for r in def_rows]
    ref_names = [r[1] for r in ref_rows]
    names = list(dict.fromkeys(def_names))
    name_ids = dict(zip(names, range(len(names)), strict=True))
    def_name = _ints(map(name_ids.__getitem__, def_names), len(def_rows))
    ref_name = np.array([name_ids.get(n, -1) for n in ref_names], np.int64)
    ref_keep = np.flatnonzero(ref_name >= 0)
    def_blob = np.array([r[0] for r in def_rows], np.int64)
    ref_blob = np.array([r[0] for r in ref_rows], np.int64)[ref_keep]
    # a blob's readable paths, each blob's in a run of `flat` (a blob at two paths is two files)
    used = set(distinct(np.concatenate((def_blob, ref_blob))).tolist())
    kept = {b: where if readable is None else [p for p in where if readable(p)]
            for b, where in blob_paths.items() if b in used}
    paths = sorted(p for where in kept.values() for p in where)
    at = {p: i for i, p in enumerate(paths)}
    top = max([*kept, 0]) + 1
    first, count = np.zeros(top, np.int64), np.zeros(top, np.int64)
    flat: list[int] = []
    for blob, where in kept.items():
        first[blob], count[blob] = len(flat), len(where)
        flat += [at[p] for p in where]
    flat_paths = np.array(flat, np.int64)

    def expand(blobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # rows -> (row, file) of each of its files
        blobs = np.where(blobs < top, blobs, 0)
        row, place = ragged(count[blobs])
        return row, flat_paths[first[blobs][row] + place]

    def_row, def_path = expand(def_blob)
    ref_row, ref_path = expand(ref_blob)
    ref_row = ref_keep[ref_row]
    hidden = {kind: kind in HIDDEN_KINDS for kind in set(def_kinds)}
    kinds = np.fromiter(map(hidden.__getitem__, def_kinds), bool, len(def_rows))

    def definition(i: int) -> Definition:
        _, line, name, kind, scope = def_rows[def_row[i]]
        return Definition(name, kind, paths[def_path[i]], line, scope)

    return Table(paths, names, name_ids, def_path, def_name[def_row], kinds[def_row], ref_path, ref_name[ref_row],
                 np.array([r[2] for r in ref_rows], np.int64)[ref_row], ref_row, definition)


def pagerank(size: int, source: np.ndarray, target: np.ndarray, weight: np.ndarray, p: np.ndarray,
             alpha: float = 0.85, tol: float = 1e-8, max_iter: int = 100) -> np.ndarray:
    """Weighted personalised PageRank by power iteration over edges (source, target, weight), `weight` summing to
    1 over each source's edges, `p` the restart distribution. The edges come ordered by source: bincount adds in
    array order, and cumsum sums in order, so the sums are the ones a loop over the nodes makes."""
    dangling = np.ones(size, bool)
    dangling[source] = False
    x = p.copy()
    for _ in range(max_iter):
        # (with no edges at all, bincount answers integers: the sums below are floats)
        new: np.ndarray = np.bincount(target, weights=(alpha * x[source]) * weight, minlength=size).astype(np.float64)
        lost = x[dangling]
        new += (alpha * (float(np.cumsum(lost)[-1]) if lost.size else 0.0) + 1 - alpha) * p
        err = np.cumsum(np.abs(new - x))[-1]
        x = new
        if err < size * tol:
            break
    return x


def scored(table: Table, focus_text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each file's rank; each definition's sort key (minus the rank flowing to it, plus a thousandth of its
    file's) and tier (0: in a file the focus names, 1: a name it names, 2: the rest)."""
    paths, names = table.paths, table.names
    size, count = len(paths), len(names)
    focus = Focus(focus_text, set(paths))
    # each name's defining files, ascending (a run per name in `definer`)
    pairs = distinct(table.def_name * size + table.def_path)
    defined, definer = pairs // size, pairs % size
    definers = np.bincount(defined, minlength=count)
    starts = np.cumsum(definers) - definers
    many = definers[table.ref_name]
    keep = np.flatnonzero((many > 0) & (many <= MAX_DEFINERS))
    ref_path, ref_name, many = table.ref_path[keep], table.ref_name[keep], many[keep]
    name_weight = np.zeros(count)  # a name many files define could mean any of them: damped
    for i in distinct(ref_name).tolist():
        name_weight[i] = focus.weight(names[i]) * min(1.0, 4 / int(definers[i]))
    ref_weight = name_weight[ref_name] * np.sqrt(table.ref_uses[keep])
    # flows: each reference to each file defining the name, in the languages' family, in the references' order
    ref, place = ragged(many)
    src, dst = ref_path[ref], definer[starts[ref_name[ref]] + place]
    family_ids: dict[str, int] = {}
    family = _ints((family_ids.setdefault(language_family(p), len(family_ids)) for p in paths), size)
    ok = np.flatnonzero((src != dst) & (family[src] == family[dst]))
    src, dst, flow_name, flow_weight = src[ok], dst[ok], ref_name[ref[ok]], ref_weight[ref[ok]]
    # edges file -> file, summed as the flows come; a file's out-weight over its edges in the order they appeared
    edge_key, first, edge_of = np.unique(src * size + dst, return_index=True, return_inverse=True)
    edge_weight = np.bincount(edge_of.reshape(-1), weights=flow_weight, minlength=len(edge_key))
    appeared = np.argsort(first, kind="stable")
    edge_src, edge_dst = edge_key // size, edge_key % size
    out_weight = np.bincount(edge_src[appeared], weights=edge_weight[appeared], minlength=size)
    order = appeared[np.argsort(edge_src[appeared], kind="stable")]
    # Files the focus names share half of the restart mass, files in folders it names a sixth; the rest
    # is spread over every file, so files the focus does not reach still rank among themselves.
    personal = dict.fromkeys(paths, 1.0)
    for group, share in ((focus.files, 1.0), (focus.folder_files, 0.2)):
        for p in group:
            personal[p] += share * len(paths) / len(group)
    total = sum(personal.values())
    restart = np.array([personal[p] / total for p in paths])
    rank = pagerank(size, edge_src[order], edge_dst[order], edge_weight[order] / out_weight[edge_src[order]],
                     restart)
    # each file's rank flows to the definitions it references, by the weight of its references to them
    flow_total = np.bincount(src, weights=flow_weight, minlength=size)
    share = rank[src] * flow_weight / flow_total[src]
    starts_at = np.zeros(size, np.int64)
    firsts, at = np.unique(src, return_index=True)
    starts_at[firsts] = at
    by_source = np.argsort(starts_at[src], kind="stable")  # file by file, in the order files first refer
    score_key, score_of = np.unique((dst * count + flow_name)[by_source], return_inverse=True)
    scores = np.bincount(score_of.reshape(-1), weights=share[by_source], minlength=len(score_key))
    def_key = table.def_path * count + table.def_name
    found = np.minimum(np.searchsorted(score_key, def_key), max(0, len(score_key) - 1))
    hit = (score_key[found] == def_key) if len(score_key) else np.zeros(len(def_key), bool)
    key = -(np.where(hit, scores[found] if len(score_key) else 0.0, 0.0) + 1e-3 * rank[table.def_path])
    in_focus = np.zeros(size, bool)
    in_focus[[i for i, p in enumerate(paths) if p in focus.files]] = True
    named = np.zeros(count, bool)
    named[[table.name_ids[n] for n in focus.names if n in table.name_ids]] = True
    return rank, key, np.where(in_focus[table.def_path], 0, np.where(named[table.def_name], 1, 2))


def ranked(table: Table, focus_text: str, limit: int | None) -> list[Definition]:
    """The ranking of rank_definitions, over the table's arrays: by tier, key, then path, line, name, kind."""
    if not table.paths or limit == 0:
        return []
    _, key, tier = scored(table, focus_text)
    shown = np.flatnonzero(~table.hidden)
    best = shown[np.lexsort((key[shown], tier[shown]))]
    if limit is not None and limit < len(best):
        # the first `limit`, and every definition tied with the last of them, ordered exactly below
        last = best[limit - 1]
        best = np.union1d(best[:limit], shown[(tier[shown] == tier[last]) & (key[shown] == key[last])])
    chosen = [(int(tier[i]), float(key[i]), table.definition(int(i))) for i in best.tolist()]
    chosen.sort(key=lambda c: (c[0], c[1], c[2].path, c[2].line, c[2].name, c[2].kind))
    return [d for _, _, d in chosen][:limit]
