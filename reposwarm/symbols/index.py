"""A symbol index of a git revision: definitions and references, parsed with tree-sitter.

Why: symbol_lookup and the planner's repository map need to know where names are
defined and used, in repositories too large to grep or re-parse on every call.
Blobs are content-addressed, so a parse is cached in SQLite by blob id and a new
commit re-parses only the blobs it changed. Indexing reads the object store
(`git ls-tree`, `git cat-file --batch`) and never the worktree: a lane's worktree
gets a checkpoint commit after every turn that changed it, so indexing its HEAD
is enough (edits made earlier in the same turn show up from the next turn on).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import posixpath
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NamedTuple

from reposwarm.vcs import gitcmd

QUERIES = Path(__file__).with_name("queries")
# language -> (module, factory function, query files)
LANGUAGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "python": ("tree_sitter_python", "language", ("python.scm",)),
    "go": ("tree_sitter_go", "language", ("go.scm",)),
    "typescript": ("tree_sitter_typescript", "language_typescript", ("ecma.scm", "typescript.scm")),
    "tsx": ("tree_sitter_typescript", "language_tsx", ("ecma.scm", "typescript.scm", "jsx.scm")),
    "javascript": ("tree_sitter_javascript", "language", ("ecma.scm", "javascript.scm", "jsx.scm")),
    "java": ("tree_sitter_java", "language", ("java.scm",)),
    "rust": ("tree_sitter_rust", "language", ("rust.scm",)),
}
EXTENSIONS = {".py": "python", ".pyi": "python", ".go": "go", ".ts": "typescript", ".mts": "typescript",
              ".cts": "typescript", ".tsx": "tsx", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
              ".jsx": "javascript", ".java": "java", ".rs": "rust"}
CLASSLIKE = frozenset({"class", "interface", "struct", "trait", "impl", "enum"})
NOT_SCOPES = frozenset({"variable", "constant", "field"})
MAX_BLOB_BYTES = 1_000_000  # larger files are generated or vendored; indexed as empty
PARALLEL_MIN_BLOBS = 300  # below this, starting worker processes costs more than it saves
CHUNK_BYTES = 1_500_000
KEEP_SNAPSHOTS = 8
MAX_REF_ROWS = 20_000  # per lookup, before the readable filter and ranking
SCHEMA_VERSION = "1"


class SymbolIndexError(Exception):
    """The index cannot answer (not a git repository, an unknown revision)."""


class Definition(NamedTuple):
    name: str
    kind: str
    path: str
    line: int
    scope: str  # the qualified enclosing definition (Class, Class.method), or ""


class Reference(NamedTuple):
    name: str
    path: str
    line: int


class RefCount(NamedTuple):
    path: str
    name: str
    uses: int  # how many times (not `count`: a tuple has a method of that name)


class SymbolRows(NamedTuple):
    paths: dict[int, list[str]]  # blob id -> the revision's paths of it (in path order)
    defs: list[tuple[int, int, str, str, str]]  # (blob, line, name, kind, scope), by blob, line, name, kind
    refs: list[tuple[int, str, int]]  # (blob, name, uses): how often the blob references the name


@dataclass
class Lookup:
    definitions: list[Definition] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    more_definitions: int = 0
    more_references: int = 0


@dataclass
class UpdateStats:
    tree: str
    files: int  # indexed files in the revision
    parsed: int  # blobs parsed by this update (the rest came from the cache)
    seconds: float


def language_of(path: str) -> str | None:
    return EXTENSIONS.get(posixpath.splitext(path)[1].lower())


def indexed_globs() -> list[str]:
    """Pathspec globs of the files the index parses (the rest is for grep)."""
    return sorted(f"*{ext}" for ext in EXTENSIONS)


@functools.cache
def queries_digest() -> str:
    """Identifies the schema and the queries a cache was built with; a change rebuilds it."""
    digest = hashlib.sha1(SCHEMA_VERSION.encode())
    for path in sorted(QUERIES.glob("*.scm")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


# --- extraction ---------------------------------------------------------------------------------------------------

def _extractor(lang: str) -> tuple[Any, Any]:
    """The parser and the tags query cursor of a language, one per thread (parsers are not thread-safe)."""
    extractors: dict[str, tuple[Any, Any]] = _LOCAL.__dict__.setdefault("extractors", {})
    if lang not in extractors:
        from tree_sitter import Language, Parser, Query, QueryCursor

        module, factory, files = LANGUAGES[lang]
        language = Language(getattr(import_module(module), factory)())
        query = Query(language, "\n".join((QUERIES / f).read_text() for f in files))
        extractors[lang] = (Parser(language), QueryCursor(query))
    return extractors[lang]


_LOCAL = threading.local()
Symbols = tuple[list[tuple[str, str, int, str]], list[tuple[str, int]]]  # defs (name, kind, line, scope), refs


def extract(lang: str, source: bytes) -> Symbols:
    """Definitions (name, kind, line, scope) and references (name, line) of one file."""
    parser, cursor = _extractor(lang)
    tree = parser.parse(source)
    defs: dict[int, tuple] = {}  # name start byte -> (pattern, name, kind, definition node, receiver, line)
    scopes: list[tuple[int, int, str, str]] = []  # scope-only containers: start, end, name, kind
    refs: dict[int, tuple[str, int]] = {}
    for pattern, caps in cursor.matches(tree.root_node):
        for key, nodes in caps.items():
            if not key.startswith("name."):
                continue
            role, _, kind = key[5:].partition(".")
            name_node = nodes[0]
            name = source[name_node.start_byte:name_node.end_byte].decode("utf-8", "replace")
            if role == "reference":
                refs.setdefault(name_node.start_byte, (name, name_node.start_point[0] + 1))
                continue
            outer = caps.get(f"{role}.{kind}", nodes)[0]
            if role == "scope":
                scopes.append((outer.start_byte, outer.end_byte, name, kind))
                continue
            prev = defs.get(name_node.start_byte)
            if prev is None or pattern < prev[0]:
                receiver = caps.get("receiver")
                recv = source[receiver[0].start_byte:receiver[0].end_byte].decode("utf-8", "replace") if receiver else ""
                defs[name_node.start_byte] = (pattern, name, kind, outer, recv, name_node.start_point[0] + 1)
    # Enclosing scopes by a sweep over nested ranges: containers open on a stack, closed once passed.
    items = [(n.start_byte, -n.end_byte, 1, name, kind, recv, line) for _, name, kind, n, recv, line in defs.values()]
    items += [(s, -e, 0, name, kind, "", 0) for s, e, name, kind in scopes]
    items.sort()
    stack: list[tuple[int, str, str]] = []
    out: list[tuple[str, str, int, str]] = []
    for start, neg_end, is_def, name, kind, recv, line in items:
        while stack and stack[-1][0] <= start:
            stack.pop()
        scope, scope_kind = (stack[-1][1], stack[-1][2]) if stack else ("", "")
        if recv:
            scope, scope_kind = recv, "struct"
        if is_def:
            if kind == "function" and scope_kind in CLASSLIKE:
                kind = "method"
            out.append((name, kind, line, scope))
        if kind not in NOT_SCOPES:
            stack.append((-neg_end, f"{scope}.{name}" if scope else name, kind))
    ref_list = sorted({(name, line) for start, (name, line) in refs.items() if start not in defs})
    return sorted(set(out), key=lambda d: (d[2], d[0], d[1])), ref_list


def _parse_chunk(chunk: list[tuple[str, str, bytes]]) -> list[tuple[str, str, Symbols]]:
    """Worker-process entry: parse a chunk of (blob id, language, content)."""
    return [(sha, lang, extract(lang, data) if len(data) <= MAX_BLOB_BYTES else ([], [])) for sha, lang, data in chunk]


# --- git ----------------------------------------------------------------------------------------------------------

def git_output(cwd: Path, *args: str) -> str:
    proc = gitcmd.run(list(args), cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SymbolIndexError(f"git {' '.join(args)}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def cat_blobs(cwd: Path, shas: list[str]) -> Generator[tuple[str, bytes], None, None]:
    """Contents of blobs, streamed from one `git cat-file --batch` (requests written by a thread: no deadlock)."""
    proc = gitcmd.popen(["cat-file", "--batch"], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    request = "".join(f"{s}\n" for s in shas).encode()

    def write() -> None:
        with contextlib.suppress(OSError):  # git was stopped early (below): nobody wants the rest
            stdin.write(request)
            stdin.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        for _ in shas:
            header = stdout.readline().split()
            if len(header) != 3:  # "<sha> missing"
                continue
            data = stdout.read(int(header[2]))
            stdout.read(1)
            yield header[0].decode(), data
    finally:
        # Closed early (the caller failed half-way), git blocks on output nobody reads and the writer on git's
        # input: stop git first, or joining the writer waits for ever.
        if proc.poll() is None:
            proc.kill()
        writer.join()
        stdout.close()
        proc.wait()


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT: writers from several lanes (and processes) take turns instead of failing."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def default_db_path(repo_path: str | Path) -> Path:
    """$REPOSWARM_HOME/index/<sha1 of the repository's absolute path>.sqlite; a linked worktree (a lane)
    maps to its main repository, so every lane and run over one repository shares the blob cache."""
    home = Path(os.environ.get("REPOSWARM_HOME") or Path.home() / ".reposwarm")
    return home / "index" / f"{hashlib.sha1(str(_main_repository(Path(repo_path).resolve())).encode()).hexdigest()}.sqlite"


@functools.lru_cache(maxsize=256)
def _main_repository(path: Path) -> Path:
    common = Path(git_output(path, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    return (common.parent if common.name == ".git" else common).resolve()


# --- the index ----------------------------------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs(id INTEGER PRIMARY KEY, sha TEXT NOT NULL UNIQUE, lang TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS defs(blob INTEGER NOT NULL, line INTEGER NOT NULL, name TEXT NOT NULL,
    kind TEXT NOT NULL, scope TEXT NOT NULL, PRIMARY KEY(blob, line, name, kind)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS defs_name ON defs(name COLLATE NOCASE);
CREATE TABLE IF NOT EXISTS refs(blob INTEGER NOT NULL, name TEXT NOT NULL, line INTEGER NOT NULL,
    PRIMARY KEY(blob, name, line)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_name ON refs(name);
CREATE TABLE IF NOT EXISTS snapshots(id INTEGER PRIMARY KEY, tree TEXT NOT NULL UNIQUE, used REAL NOT NULL);
CREATE TABLE IF NOT EXISTS files(snap INTEGER NOT NULL, path TEXT NOT NULL, blob INTEGER NOT NULL,
    PRIMARY KEY(snap, path)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS files_blob ON files(snap, blob);
"""
KIND_RANK = {"class": 0, "interface": 0, "struct": 0, "trait": 0, "enum": 0, "type": 0,
             "function": 1, "method": 1, "constructor": 1, "macro": 1, "module": 2}
Progress = Callable[[str], None]


class SymbolIndex:
    """Definitions and references of a repository's revisions, cached per blob in SQLite (WAL, one file)."""

    def __init__(self, repo_path: str | Path, db_path: str | Path | None = None) -> None:
        self.repo = Path(repo_path).resolve()
        if not self.repo.is_dir():
            raise SymbolIndexError(f"{repo_path}: no such folder")
        self.db_path = Path(db_path) if db_path else default_db_path(self.repo)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.db_path, timeout=60, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA cache_size=-65536")
        self._migrate()

    def _migrate(self) -> None:
        digest = queries_digest()
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='queries'").fetchone()
        except sqlite3.OperationalError:  # a new database
            row = None
        if row and row[0] == digest:
            return
        self.db.executescript(SCHEMA)
        with self._write():  # new queries or schema: cached parses are stale
            for table in ("blobs", "defs", "refs", "snapshots", "files"):
                self.db.execute(f"DELETE FROM {table}")
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('queries', ?)", (digest,))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> SymbolIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self) -> contextlib.AbstractContextManager[None]:
        return immediate(self.db)

    def tree_of(self, rev: str) -> str:
        try:
            return git_output(self.repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}").strip()
        except SymbolIndexError as err:
            raise SymbolIndexError(f"{rev!r} is not a revision of {self.repo} ({err})") from None

    def _snapshot(self, tree: str) -> int | None:
        row = self.db.execute("SELECT id FROM snapshots WHERE tree=?", (tree,)).fetchone()
        return row[0] if row else None

    def update(self, rev: str = "HEAD", progress: Progress | None = None) -> UpdateStats:
        """Index a revision: parse the blobs not cached yet, record the revision's path -> blob map."""
        started = time.perf_counter()
        tree = self.tree_of(rev)
        snap = self._snapshot(tree)
        if snap is not None:  # indexed already; kept longer, as pruning goes by last use
            self.db.execute("UPDATE snapshots SET used=? WHERE id=?", (time.time(), snap))
            files = self.db.execute("SELECT COUNT(*) FROM files WHERE snap=?", (snap,)).fetchone()[0]
            return UpdateStats(tree, files, 0, time.perf_counter() - started)
        entries = []  # (path, sha, lang)
        for record in git_output(self.repo, "ls-tree", "-r", "-z", "--full-tree", tree).split("\0"):
            meta, _, path = record.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob" and parts[0] != "120000" and (lang := language_of(path)):
                entries.append((path, parts[2], lang))
        known = dict(self.db.execute("SELECT sha, id FROM blobs"))
        todo = {sha: lang for _, sha, lang in entries if sha not in known}
        # A first build loads faster without the name indexes, then sorts them in one go.
        bulk = len(todo) >= PARALLEL_MIN_BLOBS and not known
        if bulk:
            self.db.execute("DROP INDEX IF EXISTS defs_name")
            self.db.execute("DROP INDEX IF EXISTS refs_name")
        else:
            self.db.executescript(SCHEMA)  # indexes a killed bulk build left out come back
        try:
            parsed = self._parse(todo, progress) if todo else 0
        finally:
            if bulk:
                self.db.executescript(SCHEMA)
        if todo:
            known = dict(self.db.execute("SELECT sha, id FROM blobs"))
        with self._write():
            if self._snapshot(tree) is None:  # another process may have recorded it meanwhile
                snap = self.db.execute("INSERT INTO snapshots(tree, used) VALUES (?, ?)", (tree, time.time())).lastrowid
                self.db.executemany("INSERT OR IGNORE INTO files VALUES (?, ?, ?)",
                                    ((snap, path, known[sha]) for path, sha, _ in entries if sha in known))
            for (old,) in self.db.execute("SELECT id FROM snapshots ORDER BY used DESC LIMIT -1 OFFSET ?",
                                          (KEEP_SNAPSHOTS,)).fetchall():
                self.db.execute("DELETE FROM files WHERE snap=?", (old,))
                self.db.execute("DELETE FROM snapshots WHERE id=?", (old,))
        return UpdateStats(tree, len(entries), parsed, time.perf_counter() - started)

    def _parse(self, todo: dict[str, str], progress: Progress | None) -> int:
        """Parse blobs in this process, or over the cores in chunks when there are many."""
        # closed here, whatever happens: left to the garbage collector, its clean-up could run on any thread
        with contextlib.closing(cat_blobs(self.repo, list(todo))) as blobs:
            return self._parse_blobs(((sha, todo[sha], data) for sha, data in blobs), len(todo), progress)

    def _parse_blobs(self, contents: Iterator[tuple[str, str, bytes]], total: int, progress: Progress | None) -> int:
        workers = min(os.cpu_count() or 1, 8)
        stored = 0

        def store(results: list[tuple[str, str, Symbols]]) -> None:
            nonlocal stored
            self._store(results)
            stored += len(results)
            if progress:
                progress(f"indexing the repository: {stored:,} of {total:,} new files parsed")

        if total < PARALLEL_MIN_BLOBS or workers < 2:
            for chunk in _chunks(contents):
                store(_parse_chunk(chunk))
            return total
        # spawn, not fork: the caller may be a threaded worker process
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            pending: set[Future] = set()
            for chunk in _chunks(contents):
                pending.add(pool.submit(_parse_chunk, chunk))
                if len(pending) >= 2 * workers:  # bounded: contents are read as the workers keep up
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        store(future.result())
            for future in pending:
                store(future.result())
        return total

    def _store(self, results: list[tuple[str, str, Symbols]]) -> None:
        def_rows: list[tuple[int, int, str, str, str]] = []
        ref_rows: list[tuple[int, str, int]] = []
        with self._write():
            for sha, lang, (defs, refs) in results:
                cur = self.db.execute("INSERT OR IGNORE INTO blobs(sha, lang) VALUES (?, ?)", (sha, lang))
                if cur.rowcount != 1:  # parsed by someone else meanwhile
                    continue
                blob = cur.lastrowid
                if blob is None:  # (sqlite gives the new row's id after an insert that took)
                    continue
                def_rows += [(blob, line, name, kind, scope) for name, kind, line, scope in defs]
                ref_rows += [(blob, name, line) for name, line in refs]
            self.db.executemany("INSERT OR IGNORE INTO defs VALUES (?, ?, ?, ?, ?)", def_rows)
            self.db.executemany("INSERT OR IGNORE INTO refs VALUES (?, ?, ?)", ref_rows)

    def _ensure(self, rev: str, progress: Progress | None = None) -> int:
        snap = self._snapshot(self.tree_of(rev))
        if snap is None:
            self.update(rev, progress)
            snap = self._snapshot(self.tree_of(rev))
        assert snap is not None
        return snap

    def lookup(self, name: str, rev: str = "HEAD", limit: int = 50, readable: Callable[[str], bool] | None = None,
               progress: Progress | None = None) -> Lookup:
        """Definitions of a name (`Name` or `Scope.Name`), then its references, ranked and cut to `limit` each."""
        snap = self._ensure(rev, progress)
        *qualifier, base = name.split(".")
        scope = qualifier[-1] if qualifier else None
        rows = self.db.execute(
            # CROSS JOIN fixes the order: the name's rows first, then their paths (not every file of the snapshot)
            "SELECT d.name, d.kind, f.path, d.line, d.scope FROM defs d CROSS JOIN files f"
            " WHERE d.name=? COLLATE NOCASE AND f.snap=? AND f.blob=d.blob", (base, snap)).fetchall()
        defs = [Definition(*r) for r in rows if readable is None or readable(r[2])]
        defs.sort(key=lambda d: (d.name != base, scope is not None and d.scope.split(".")[-1] != scope,
                                 KIND_RANK.get(d.kind, 3), d.path.count("/"), len(d.path), d.path, d.line))
        refs = [Reference(base, p, line) for p, line in self.db.execute(
            "SELECT f.path, r.line FROM refs r CROSS JOIN files f WHERE r.name=? AND f.snap=? AND f.blob=r.blob"
            " LIMIT ?", (base, snap, MAX_REF_ROWS)) if readable is None or readable(p)]
        refs.sort(key=proximity(defs[:limit]))
        return Lookup(defs[:limit], refs[:limit], max(0, len(defs) - limit), max(0, len(refs) - limit))

    def symbols(self, rev: str = "HEAD") -> tuple[list[Definition], list[Reference]]:
        """Every definition and reference of a revision, in file order (for tests and debugging)."""
        snap = self._ensure(rev)
        return [Definition(*r) for r in self.db.execute(
            "SELECT d.name, d.kind, f.path, d.line, d.scope FROM files f JOIN defs d ON d.blob=f.blob"
            " WHERE f.snap=? ORDER BY f.path, d.line, d.name", (snap,))], [Reference(*r) for r in self.db.execute(
            "SELECT r.name, f.path, r.line FROM files f JOIN refs r ON r.blob=f.blob"
            " WHERE f.snap=? ORDER BY f.path, r.line, r.name", (snap,))]

    def rows(self, rev: str = "HEAD", progress: Progress | None = None) -> SymbolRows:
        """A revision's symbols as the tables hold them, by blob: read once by the survey and the map alike
        (650,000 Definitions of a 4M-line repository take seconds to build, and neither needs them all)."""
        snap = self._ensure(rev, progress)
        paths: dict[int, list[str]] = {}
        for path, blob in self.db.execute("SELECT path, blob FROM files WHERE snap=?", (snap,)):
            paths.setdefault(blob, []).append(path)
        return SymbolRows(paths, self.db.execute(
            "SELECT blob, line, name, kind, scope FROM defs WHERE blob IN (SELECT blob FROM files WHERE snap=?)"
            " ORDER BY blob, line, name, kind", (snap,)).fetchall(), self.db.execute(
            "SELECT blob, name, COUNT(*) FROM refs WHERE blob IN (SELECT blob FROM files WHERE snap=?)"
            " GROUP BY blob, name", (snap,)).fetchall())

    def defs_and_refs(self, rev: str = "HEAD", progress: Progress | None = None
                      ) -> tuple[list[Definition], list[RefCount]]:
        """Every definition of a revision (by path, line, name), and how often each file references each name
        some file defines."""
        paths, def_rows, ref_rows = self.rows(rev, progress)
        defs = sorted((Definition(name, kind, path, line, scope) for blob, line, name, kind, scope in def_rows
                       for path in paths.get(blob, ())), key=lambda d: (d.path, d.line, d.name, d.kind))
        names = {d.name for d in defs}
        return defs, [RefCount(path, name, uses) for blob, name, uses in ref_rows if name in names
                      for path in paths.get(blob, ())]


def _chunks(contents: Iterable[tuple[str, str, bytes]]) -> Iterator[list[tuple[str, str, bytes]]]:
    chunk: list[tuple[str, str, bytes]] = []
    size = 0
    for item in contents:
        chunk.append(item)
        size += len(item[2])
        if size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


# The order of a name's references in a lookup: those in a file defining it first, then by how deep a folder they
# share with a definition (symbol_lookup shows the nearest uses of a name before the far ones).
def proximity(defs: list[Definition]) -> Callable[[Reference], tuple[int, str, int]]:
    """Sort key of references: in a defining file first, then by how deep a folder they share with one."""
    files = {d.path for d in defs}
    depth: dict[str, int] = {}
    for d in defs:
        parts = d.path.split("/")
        for i in range(len(parts)):
            depth.setdefault("/".join(parts[:i]), i)

    def key(ref: Reference) -> tuple[int, str, int]:
        if ref.path in files:
            return (-1_000, ref.path, ref.line)
        parts = ref.path.split("/")[:-1]
        shared = next((depth[f] for i in range(len(parts), -1, -1) if (f := "/".join(parts[:i])) in depth), -1)
        return (-shared, ref.path, ref.line)

    return key
