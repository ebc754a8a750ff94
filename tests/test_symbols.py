"""The symbol index on real git repositories built from tests/fixtures/langs: golden symbols per language,
incremental re-indexing, lookup ranking, the readable filter, unknown languages and symbol_lookup's output.

UPDATE_GOLDEN=1 rewrites tests/golden/ from what the code produces now (review the diff before keeping it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import reposwarm.symbols.index as symbols
from reposwarm.agent.tools import Toolbox
from reposwarm.slices.policy import PathPolicy
from reposwarm.symbols.index import SymbolIndex, extract

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "langs"
GOLDEN = HERE / "golden"
LANGS = ["python", "go", "typescript", "javascript", "java", "rust"]
GIT_ENV = {"GIT_AUTHOR_NAME": "user", "GIT_AUTHOR_EMAIL": "user@localhost",
           "GIT_COMMITTER_NAME": "user", "GIT_COMMITTER_EMAIL": "user@localhost"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args], check=True,
                          capture_output=True, text=True, env={**os.environ, **GIT_ENV}).stdout.strip()


def make_repo(dest: Path, *sources: Path) -> Path:
    """A real git repository holding copies of the source folders, committed once."""
    dest.mkdir(parents=True)
    for source in sources:
        shutil.copytree(source, dest, dirs_exist_ok=True)
    git(dest, "init", "-q", "-b", "main")
    commit(dest, "fixture")
    return dest


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/<name>, or rewrite it when UPDATE_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name} differs from the golden file (UPDATE_GOLDEN=1 rewrites it)"


def symbols_json(index: SymbolIndex) -> str:
    defs, refs = index.symbols("HEAD")
    rows = {"definitions": sorted([d.path, d.line, d.kind, d.name, d.scope] for d in defs),
            "references": sorted([r.path, r.line, r.name] for r in refs)}
    # one definition or reference a line, so a golden diff reads well
    return "{\n" + ",\n".join(
        f'  "{key}": [\n' + ",\n".join(f"    {json.dumps(row)}" for row in items) + "\n  ]"
        for key, items in rows.items()) + "\n}\n"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "index.sqlite"


@pytest.mark.parametrize("lang", LANGS)
def test_golden_symbols(lang: str, tmp_path: Path, db: Path) -> None:
    repo = make_repo(tmp_path / lang, FIXTURES / lang)
    with SymbolIndex(repo, db) as index:
        stats = index.update("HEAD")
        assert stats.parsed == stats.files > 0
        check_golden(f"{lang}.json", symbols_json(index))


def test_golden_shapes_hold_what_matters() -> None:
    """The golden files themselves say the right things (a bad UPDATE_GOLDEN run would not pass this)."""
    py = json.loads((GOLDEN / "python.json").read_text())
    assert ["shapes/geometry.py", 18, "method", "area", "Circle"] in py["definitions"]
    assert ["shapes/geometry.py", 22, "function", "clamp", "Circle.scaled"] in py["definitions"]
    assert ["app.py", 9, "make_circle"] in py["references"]  # a call of a function of another file
    assert ["app.py", 1, "make_circle"] in py["references"]  # its import
    go = json.loads((GOLDEN / "go.json").read_text())
    assert ["geometry/geometry.go", 24, "method", "Area", "Circle"] in go["definitions"]  # receiver scope
    assert ["main.go", 18, "NewCircle"] in go["references"]
    rust = json.loads((GOLDEN / "rust.json").read_text())
    assert ["src/geometry.rs", 25, "method", "new", "Circle"] in rust["definitions"]  # impl scope
    assert ["src/main.rs", 3, "make_circle"] in rust["references"]
    java = json.loads((GOLDEN / "java.json").read_text())
    assert ["src/com/example/geometry/Circle.java", 13, "method", "of", "Circle"] in java["definitions"]
    assert ["src/com/example/App.java", 16, "of"] in java["references"]
    ts = json.loads((GOLDEN / "typescript.json").read_text())
    assert ["src/app.tsx", 13, "Badge"] in ts["references"]  # a JSX component use
    assert ["src/geometry.ts", 32, "function", "makeCircle", ""] in ts["definitions"]
    js = json.loads((GOLDEN / "javascript.json").read_text())
    assert ["lib/geometry.js", 17, "method", "area", "Circle"] in js["definitions"]
    assert ["app.mjs", 4, "makeCircle"] in js["references"]


def test_reindex_after_one_change_parses_one_blob(tmp_path: Path, db: Path) -> None:
    repo = make_repo(tmp_path / "repo", FIXTURES / "python", FIXTURES / "go")
    with SymbolIndex(repo, db) as index:
        first = index.update("HEAD")
        assert first.parsed == first.files
        assert index.update("HEAD").parsed == 0  # same revision: nothing to do
        target = repo / "shapes" / "geometry.py"
        target.write_text(target.read_text() + "\n\ndef unit_circle() -> Circle:\n    return make_circle(1.0)\n")
        commit(repo, "one change")
        second = index.update("HEAD")
        assert (second.parsed, second.files) == (1, first.files)
        found = index.lookup("unit_circle")
        assert [(d.path, d.line, d.kind) for d in found.definitions] == [("shapes/geometry.py", 35, "function")]
        # the old revision still answers from its own snapshot
        assert not index.lookup("unit_circle", rev="HEAD~1").definitions


def test_lookup_ranks_definitions_then_references(tmp_path: Path, db: Path) -> None:
    repo = make_repo(tmp_path / "repo", FIXTURES)
    with SymbolIndex(repo, db) as index:
        found = index.lookup("Circle")
        kinds = [d.kind for d in found.definitions]
        assert kinds.index("constructor") > max(i for i, k in enumerate(kinds) if k in ("class", "struct"))
        # references: files that define Circle come first, then the rest
        def_files = {d.path for d in found.definitions}
        flags = [r.path in def_files for r in found.references]
        assert flags == sorted(flags, reverse=True) and flags[0] and not flags[-1]
        # a qualified name ranks that scope's definition first; exact case before other cases
        area = index.lookup("Shape.area").definitions
        assert area[0].scope == "Shape" and area[0].name == "area"
        assert [d.name for d in index.lookup("Area").definitions][:2] == ["Area", "Area"]
        assert len(index.lookup("Circle", limit=2).definitions) == 2
        assert index.lookup("Circle", limit=2).more_definitions == len(found.definitions) - 2


def test_lookup_respects_readable(tmp_path: Path, db: Path) -> None:
    repo = make_repo(tmp_path / "repo", FIXTURES)
    with SymbolIndex(repo, db) as index:
        found = index.lookup("Circle", readable=lambda p: p.startswith("go/"))
        assert found.definitions and found.references
        assert all(x.path.startswith("go/") for x in [*found.definitions, *found.references])


def test_unknown_language_is_skipped(tmp_path: Path, db: Path) -> None:
    repo = make_repo(tmp_path / "repo", FIXTURES / "python")
    (repo / "data.bin").write_bytes(bytes(range(256)) * 4)
    (repo / "notes.xyz").write_text("make_circle\n")
    (repo / "link.py").symlink_to("app.py")
    commit(repo, "other files")
    with SymbolIndex(repo, db) as index:
        stats = index.update("HEAD")
        assert stats.files == 3  # app.py, shapes/__init__.py, shapes/geometry.py: no symlink, no unknown files
        defs, refs = index.symbols("HEAD")
        assert {d.path for d in defs} | {r.path for r in refs} <= {"app.py", "shapes/geometry.py"}
    assert extract("python", b"def broken(:\n    pass\n")  # a syntax error still yields what parses


def test_symbol_lookup_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "repo", FIXTURES / "python", FIXTURES / "go")
    tools = Toolbox(PathPolicy(repo, ["shapes/", "app.py", "README.txt"], ["main.go"]))
    out = tools.call("symbol_lookup", {"symbol": "make_circle"})
    assert out.splitlines() == [
        "definitions:",
        "shapes/geometry.py:31: function make_circle",
        "references:",
        "app.py:1",
        "app.py:9",
        "README.txt:1:A file in a language the index does not know: make_circle is mentioned here.",
    ]
    out = tools.call("symbol_lookup", {"symbol": "Circle.area"})
    assert out.splitlines()[:3] == ["definitions:", "shapes/geometry.py:18: method area (in Circle)",
                                    "shapes/geometry.py:10: method area (in Shape)"]
    assert "geometry/" not in out  # the Go files are not readable for this lane
    # the cache lives under REPOSWARM_HOME, keyed by the repository's path
    assert len(list((tmp_path / "home" / "index").glob("*.sqlite"))) == 1
    # a repository without a commit has no index: grep answers, as before
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "a.py").write_text("def alone():\n    pass\n")
    out = Toolbox(PathPolicy(empty, ["a.py"])).call("symbol_lookup", {"symbol": "alone"})
    assert out.splitlines()[:2] == ["definitions:", "a.py:1:def alone():"]


def test_lane_worktree_shares_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane's worktree indexes its HEAD (its checkpoint commits) into its main repository's cache."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "repo", FIXTURES / "python")
    with SymbolIndex(repo) as index:
        index.update("HEAD")
    lane = tmp_path / "lane"
    git(repo, "worktree", "add", "-q", "-b", "swarm/lane", str(lane))
    (lane / "shapes" / "extra.py").write_text("def extra_shape():\n    return make_circle(3.0)\n")
    commit(lane, "checkpoint after turn 1")
    with SymbolIndex(lane) as index:
        assert index.db_path == symbols.default_db_path(repo)
        stats = index.update("HEAD")
        assert stats.parsed == 1
        assert [d.path for d in index.lookup("extra_shape").definitions] == ["shapes/extra.py"]
    with SymbolIndex(repo) as index:  # the main checkout's HEAD does not have it
        assert not index.lookup("extra_shape").definitions


def test_parallel_build_matches_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", FIXTURES)
    for i in range(12):  # distinct blobs, so each is parsed
        (repo / f"gen_{i}.py").write_text(f"def gen_{i}():\n    return make_circle({i})\n")
    commit(repo, "more files")
    with SymbolIndex(repo, tmp_path / "serial.sqlite") as serial:
        serial_symbols = serial.symbols("HEAD")
    monkeypatch.setattr(symbols, "PARALLEL_MIN_BLOBS", 4)
    monkeypatch.setattr(symbols, "CHUNK_BYTES", 2_000)
    said: list[str] = []
    with SymbolIndex(repo, tmp_path / "parallel.sqlite") as parallel:
        stats = parallel.update("HEAD", said.append)
        assert stats.parsed == stats.files
        assert parallel.symbols("HEAD") == serial_symbols
    counts = [int(m.split(": ")[1].split(" of ")[0]) for m in said]
    assert len(said) > 1 and counts == sorted(counts), said  # as the chunks come back, counted up
    assert said[-1] == f"indexing the repository: {stats.parsed} of {stats.parsed} new files parsed"


def _cat_files() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if "git cat-file --batch" in line]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("parallel", [False, True])
def test_a_build_failing_half_way_stops_at_once_and_leaves_nothing_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel: bool) -> None:
    """A failure half-way through a first index (here its progress report; a full disk or a locked database
    alike) must surface at once: the blob stream's git process and writer thread stopped, not waited on for
    ever (which, left to the garbage collector, once froze a worker's event loop)."""
    repo = make_repo(tmp_path / "repo", FIXTURES)
    for i in range(2000):  # requests and answers both more than a pipe holds
        (repo / f"gen_{i}.py").write_text(f"def gen_{i}():\n    return {'x' * 2000!r}\n")
    commit(repo, "many files")
    monkeypatch.setattr(symbols, "CHUNK_BYTES", 20_000)
    if parallel:
        monkeypatch.setattr(symbols, "PARALLEL_MIN_BLOBS", 4)
    before = _cat_files()

    def fail(message: str) -> None:
        raise OSError(f"no space left on device (after {message})")

    with SymbolIndex(repo, tmp_path / "index.sqlite") as index:
        with pytest.raises(OSError, match="no space left"):
            index.update("HEAD", fail)
        assert _cat_files() == before
        stats = index.update("HEAD")  # and the index goes on from where it stopped, keeping what it had parsed
        assert 0 < stats.parsed < stats.files and index.lookup("gen_1999").definitions
