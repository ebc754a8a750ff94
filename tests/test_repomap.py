"""The repository map on a real multi-language git repository: golden output, the token budget, focus
files first, the readable filter, the PageRank against networkx's, the vectorised ranking against the pure-Python
one it replaced, and the planner's message."""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from activities.planning import base_map
from reposwarm.agent.prompts import planner_message
from reposwarm.contracts import HelperRole
from reposwarm.intel import ranking, repomap
from reposwarm.intel.layout import survey, survey_with_map
from reposwarm.intel.ranking import HIDDEN_KINDS, MAX_DEFINERS, Focus, language_family
from reposwarm.intel.repomap import fit, rank_definitions, repo_map
from reposwarm.symbols.index import Definition, RefCount, SymbolIndex, language_of
from tests.test_symbols import FIXTURES, check_golden, make_repo

ROOT = Path(__file__).resolve().parents[1]

FOCUS = "Give circles a unit: change make_circle in python/shapes/geometry.py and every caller of it."


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FIXTURES)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "index.sqlite"


def test_golden_map(repo: Path, db: Path) -> None:
    text = repo_map(repo, "HEAD", budget_tokens=250, focus_text=FOCUS, db_path=db)
    check_golden("repomap.txt", text + "\n")


def test_map_respects_the_budget(repo: Path, db: Path) -> None:
    sizes = []
    for budget in (0, 10, 40, 120, 400, 100_000):
        text = repo_map(repo, "HEAD", budget_tokens=budget, db_path=db)
        assert len(text) / 4 <= budget
        sizes.append(len(text.splitlines()))
    assert sizes == sorted(sizes) and sizes[0] == 0 and sizes[2] > 0
    with SymbolIndex(repo, db) as index:
        defs, refs = index.defs_and_refs("HEAD")
    everything = repo_map(repo, "HEAD", budget_tokens=100_000, db_path=db)
    shown = [d for d in defs if d.kind != "field"]
    assert len(everything.splitlines()) == len(shown) + len({d.path for d in shown})
    # the budget is used: one more definition would not have fitted
    ranked = rank_definitions(defs, refs)
    entries = sum(line.startswith("  ") for line in fit(ranked, 40).splitlines())
    assert len(fit(ranked[:entries + 1], 10_000)) > 40 * 4


def test_focus_file_comes_first(repo: Path, db: Path) -> None:
    for focus, path in [("Fix totalArea in go/main.go", "go/main.go"),
                        ("Speed up src/main.rs please", "rust/src/main.rs"),
                        (FOCUS, "python/shapes/geometry.py")]:
        lines = repo_map(repo, "HEAD", budget_tokens=120, focus_text=focus, db_path=db).splitlines()
        assert lines[0] == f"{path}:", (focus, lines[:3])
        first_file = [line for line in lines[1:] if line.startswith("  ")]
        assert first_file, lines
    # a named identifier ranks its definitions right after the focus files
    lines = repo_map(repo, "HEAD", budget_tokens=60, focus_text="Rename NewCircle", db_path=db).splitlines()
    assert lines[:2] == ["go/geometry/geometry.go:", "  38: function NewCircle"]


def test_map_respects_readable(repo: Path, db: Path) -> None:
    text = repo_map(repo, "HEAD", budget_tokens=2_000, readable=lambda p: p.startswith("java/"), db_path=db)
    headers = [line for line in text.splitlines() if not line.startswith(" ")]
    assert headers and all(h.startswith("java/") for h in headers)


def test_referenced_files_outrank_leaves(repo: Path, db: Path) -> None:
    """Without a focus, definitions that other files use come before those nobody references."""
    lines = repo_map(repo, "HEAD", budget_tokens=100_000, db_path=db).splitlines()
    headers = [line[:-1] for line in lines if not line.startswith(" ")]
    assert headers.index("python/shapes/geometry.py") < headers.index("python/app.py")
    assert headers.index("go/geometry/geometry.go") < headers.index("go/main.go")


def test_a_repository_whose_files_reference_nothing_has_a_map(tmp_path: Path) -> None:
    """No reference between files, so no edge at all: the rank is the restart distribution, and the map lists
    the definitions (numpy's bincount of no edges is integers, which the sums must not trip over)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.py").write_text("NAME = 1\n")
    (source / "b.py").write_text("OTHER = 2\n")
    repo = make_repo(tmp_path / "repo", source)
    text = repo_map(repo, "HEAD", budget_tokens=200, focus_text="NAME everywhere", db_path=tmp_path / "i.sqlite")
    assert "NAME" in text and "OTHER" in text, text


def test_pagerank_matches_networkx() -> None:
    reference = getattr(nx.algorithms.link_analysis.pagerank_alg, "_pagerank_python", None)
    if reference is None:
        pytest.skip("this networkx has no pure-Python pagerank to compare with")
    rng = random.Random(3)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(40))
    for _ in range(150):
        a, b = rng.randrange(40), rng.randrange(40)
        if a != b:
            graph.add_edge(a, b, weight=rng.uniform(0.1, 5))
    personal = {3: 1.0, 7: 0.5}
    ours = dict(zip(sorted(graph), _vectorised_pagerank(graph, personal).tolist(), strict=True))
    theirs = reference(graph, personalization=personal, tol=1e-10, max_iter=500)
    assert all(abs(ours[n] - theirs[n]) < 1e-6 for n in graph)
    assert abs(sum(ours.values()) - 1) < 1e-9
    assert _vectorised_pagerank(graph, personal).tolist() == list(_reference_pagerank(graph, personal).values())


def _vectorised_pagerank(graph: nx.DiGraph, personal: dict) -> np.ndarray:
    nodes = sorted(graph)
    at = {n: i for i, n in enumerate(nodes)}
    edges = [(at[a], at[b], w / sum(graph.succ[a][c]["weight"] for c in graph.succ[a]))
             for a in nodes for b, w in ((b, d["weight"]) for b, d in graph.succ[a].items())]
    total = sum(personal.get(n, 0.0) for n in nodes)
    source, target, weight = (np.array(column) for column in zip(*edges, strict=True))
    return ranking.pagerank(len(nodes), source, target, weight, np.array([personal.get(n, 0.0) / total
                                                                               for n in nodes]))


# --- the ranking as it was before it was vectorised: the reference of the vectorised one ---------------------------

def _reference_pagerank(graph: nx.DiGraph, personalization: dict | None, alpha: float = 0.85, tol: float = 1e-8,
                        max_iter: int = 100) -> dict:
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


def _reference_rank(defs: list[Definition], refs: list[RefCount], focus_text: str, limit: int | None
                    ) -> tuple[dict[str, float], dict[tuple[str, str], float], list[Definition]]:
    """The files' ranks, the definitions' scores and the ranking, as rank_definitions had them in pure Python."""
    paths = sorted({d.path for d in defs} | {r.path for r in refs})
    focus = Focus(focus_text, set(paths))
    found: dict[str, set[str]] = defaultdict(set)
    for d in defs:
        found[d.name].add(d.path)
    definers = {name: sorted(where) if len(where) > 1 else list(where) for name, where in found.items()}
    flows: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    edges: dict[tuple[str, str], float] = defaultdict(float)
    family = {p: language_family(p) for p in paths}
    name_weight: dict[str, float] = {}
    for path, name, count in refs:
        where = definers.get(name, ())
        if not where or len(where) > MAX_DEFINERS:
            continue
        if name not in name_weight:
            name_weight[name] = focus.weight(name) * min(1.0, 4 / len(where))
        weight = name_weight[name] * math.sqrt(count)
        for target in where:
            if target != path and family[target] == family[path]:
                flows[path].append((target, name, weight))
                edges[(path, target)] += weight
    graph = nx.DiGraph()
    graph.add_nodes_from(paths)
    graph.add_weighted_edges_from((a, b, w) for (a, b), w in edges.items())
    personal = dict.fromkeys(paths, 1.0)
    for group, share in ((focus.files, 1.0), (focus.folder_files, 0.2)):
        for p in group:
            personal[p] += share * len(paths) / len(group)
    rank = _reference_pagerank(graph, personal)
    score: dict[tuple[str, str], float] = defaultdict(float)
    for source, outgoing in flows.items():
        total = sum(w for _, _, w in outgoing)
        for target, name, w in outgoing:
            score[(target, name)] += rank[source] * w / total
    shown = [d for d in defs if d.kind not in HIDDEN_KINDS]

    def key(d: Definition) -> tuple:
        tier = 0 if d.path in focus.files else 1 if (d.name in focus.names) else 2
        return (tier, -(score[(d.path, d.name)] + 1e-3 * rank.get(d.path, 0.0)), d.path, d.line)

    return rank, dict(score), sorted(shown, key=key) if limit is None else heapq.nsmallest(limit, shown, key=key)


FOCUSES = ["", FOCUS, "Rename NewCircle", "Fix totalArea in go/main.go", "the retry budget of the symbol index and "
           "its SymbolIndex.lookup, in reposwarm/intel/ and layout.py"]


@pytest.mark.parametrize("which", ["fixtures", "own"])
def test_vectorised_rank_equals_the_pure_python_one(which: str, tmp_path: Path) -> None:
    """On real repositories (the multi-language fixtures; this project's own package beside them), every file's
    rank, every definition's score and the whole ranking are the pure-Python ranking's (within 1e-9)."""
    sources = [FIXTURES] if which == "fixtures" else [ROOT / "reposwarm", FIXTURES]
    repo = make_repo(tmp_path / "repo", *sources)
    with SymbolIndex(repo, tmp_path / "index.sqlite") as index:
        defs, refs = index.defs_and_refs("HEAD")
        rows = index.rows("HEAD")
    assert len(defs) > (1_000 if which == "own" else 50), len(defs)
    for focus in FOCUSES:
        rank, score, ranked = _reference_rank(defs, refs, focus, None)
        table = ranking.table_of_lists(defs, refs)
        ours, key, _ = ranking.scored(table, focus)
        assert table.paths == sorted(rank)
        assert max(abs(a - rank[p]) for p, a in zip(table.paths, ours.tolist(), strict=True)) < 1e-9
        assert sum(rank.values()) == pytest.approx(1, abs=1e-9)
        expected = [-(score.get((d.path, d.name), 0.0) + 1e-3 * rank[d.path]) for d in defs]
        assert max(abs(a - b) for a, b in zip(key.tolist(), expected, strict=True)) < 1e-9
        assert rank_definitions(defs, refs, focus) == ranked
        assert rank_definitions(defs, refs, focus, limit=40) == ranked[:40]
        assert repomap.rank_rows(rows, focus, limit=40) == ranked[:40]  # from the index's rows, as the map reads
        readable = [d for d in defs if d.path.startswith("python/")]
        assert repomap.rank_rows(rows, focus, limit=30, readable=lambda p: p.startswith("python/")) == \
            _reference_rank(readable, [r for r in refs if r.path.startswith("python/")], focus, 30)[2]


def test_survey_with_map_is_survey_and_repo_map(repo: Path, db: Path) -> None:
    """survey_with_map answers what survey and repo_map answer, from one read of the index; an index that cannot
    answer leaves the map empty and the layout says why."""
    with SymbolIndex(repo, db) as index:
        found, text = survey_with_map(repo, "HEAD", FOCUS, budget_tokens=250, index=index)
        assert found == survey(repo, "HEAD", index=index)
    assert text == repo_map(repo, "HEAD", budget_tokens=250, focus_text=FOCUS, db_path=db) and text
    assert found.notes and any(n.startswith("imports from the symbol index") for n in found.notes)
    closed = SymbolIndex(repo, db)
    closed.close()
    found, text = survey_with_map(repo, "HEAD", FOCUS, budget_tokens=250, index=closed)
    assert text == "" and found.packages
    assert any(n.startswith("no import graph: the symbol index could not read 'HEAD'") for n in found.notes)


def test_planner_gets_the_map(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    said: list[str] = []
    text = base_map(str(repo), "HEAD", FOCUS, said.append)
    assert text.startswith("python/shapes/geometry.py:\n")
    files = sum(1 for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts and language_of(p.name))
    # how the work goes, for the planner activity's heartbeat details: the first index, then the ranking
    assert said[-2] == f"indexing the repository: {files} of {files} new files parsed", said
    assert said[-1].startswith("ranking ") and said[-1].endswith(" definitions for the repository map")
    assert base_map(str(tmp_path), "HEAD", FOCUS, said.append) == ""  # not a repository: no map, the file list stays
    message = planner_message("Add units", {"api": HelperRole(allowed_paths=["python/"])}, [], None,
                              ["python/app.py"], repo_map=text)
    assert message.index("Repository map") < message.index(text) < message.index("Repository files:")
