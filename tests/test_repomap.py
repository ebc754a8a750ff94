"""The repository map on a real multi-language git repository: golden output, the token budget, focus
files first, the readable filter, the PageRank against networkx's, and the planner's message."""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import pytest

from activities.model import _repo_map
from reposwarm.agent.prompts import planner_message
from reposwarm.contracts import HelperRole
from reposwarm.intel.repomap import _pagerank, fit, rank_definitions, repo_map
from reposwarm.intel.symbols import SymbolIndex, language_of
from tests.test_symbols import FIXTURES, check_golden, make_repo

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
    ours = _pagerank(graph, personal)
    theirs = reference(graph, personalization=personal, tol=1e-10, max_iter=500)
    assert all(abs(ours[n] - theirs[n]) < 1e-6 for n in graph)
    assert abs(sum(ours.values()) - 1) < 1e-9


def test_planner_gets_the_map(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    said: list[str] = []
    text = _repo_map(str(repo), "HEAD", FOCUS, said.append)
    assert text.startswith("python/shapes/geometry.py:\n")
    files = sum(1 for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts and language_of(p.name))
    # how the work goes, for the planner activity's heartbeat details: the first index, then the ranking
    assert said[-2] == f"indexing the repository: {files} of {files} new files parsed", said
    assert said[-1].startswith("ranking ") and said[-1].endswith(" definitions for the repository map")
    assert _repo_map(str(tmp_path), "HEAD", FOCUS, said.append) == ""  # not a repository: no map, the file list stays
    message = planner_message("Add units", {"api": HelperRole(allowed_paths=["python/"])}, [], None,
                              ["python/app.py"], repo_map=text)
    assert message.index("Repository map") < message.index(text) < message.index("Repository files:")
