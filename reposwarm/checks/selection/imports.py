"""The imports of a git revision's files: per file, the specifiers it imports, as the resolver takes them.

Why: affected-test selection (reposwarm/checks/selection/affected.py) runs the tests a change can reach, which are the files
that read a changed file, directly or through others. Read from git objects as the symbol index is
(reposwarm/symbols/index.py: `git ls-tree`, `git cat-file --batch`), never the worktree. Imports are found with
regexes (a 4M-line tree in seconds; tree-sitter would take minutes), cached per blob in SQLite beside the symbol
index (reposwarm/checks/selection/resolve.py caches the resolved graph per tree in the same file). What is read, and what
the resolver makes of it (over-approximating: it never drops an import it could place):
- Python: `import a.b`, `from a.b import c` (c a module or a name), relative imports, import_module("a.b");
  by dotted path suffix against every .py file (any source root works); a module reads every __init__.py above
  it, and a test every conftest.py above it;
- JS/TS: import/export from, require(), import(), jest/vi.mock(); relative specifiers with the usual extension
  and index resolution (and .js written for .ts); a template literal's folder; bare specifiers naming a package
  of the tree (any package.json's "name") read the package; tsconfig paths and baseUrl, "@/", "~/", "#";
- Go: an import is a package folder (by every go.mod's module path, and vendor/); files of one package read each
  other, its tests read it and its testdata/, //go:embed patterns are read;
- Rust: crates: a crate's files belong to it, and a crate reads the crates of the tree its Cargo.toml lists;
- Java: `import a.b.C;`, `import a.b.*;`, static imports, by declared package; files of one package read each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import re
import sqlite3
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

from reposwarm.symbols import index as symbols

CODE = {".py": "py", ".pyi": "py", ".js": "js", ".mjs": "js", ".cjs": "js", ".jsx": "js", ".ts": "js", ".mts": "js",
        ".cts": "js", ".tsx": "js", ".go": "go", ".java": "java", ".rs": "rs"}
MANIFESTS = {"Cargo.toml": "cargo", "package.json": "npm", "go.mod": "gomod"}
DOC_EXTS = (".md", ".markdown", ".rst", ".adoc")
JS_EXTS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
_TSCONFIG = re.compile(r"^[tj]sconfig[\w.-]*\.json$")
KEEP_GRAPHS = 8
_BATCH = 900  # sqlite's bound on parameters, with room
BLOBS_READ = [0]  # blobs read from git by this process (a warm answer reads none: tests hold it to that)


def kind_of(path: str) -> str | None:
    """What the graph reads a file as: py, js, go, java, rs (code), cargo, npm, gomod, tsconfig (manifests)."""
    name = path.rpartition("/")[2]
    if name in MANIFESTS:
        return MANIFESTS[name]
    if name.startswith(("tsconfig", "jsconfig")) and _TSCONFIG.match(name):
        return "tsconfig"
    dot = name.rfind(".")
    return CODE.get(name[dot:].lower()) if dot > 0 else None


def is_code(path: str) -> bool:
    name = path.rpartition("/")[2]
    dot = name.rfind(".")
    return dot > 0 and name[dot:].lower() in CODE


# --- extraction: a blob's import specifiers, as strings ------------------------------------------------------------

_PY = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n;#]*(?:\\\n[^\n;#]*)*)"
                 rb"|import[ \t]+([^\n;#]*(?:\\\n[^\n;#]*)*))", re.M)
_PY_DYNAMIC = re.compile(rb"""(?:import_module|__import__|import_string)\(\s*['"]([\w.]+)['"]""")
_WORD = re.compile(r"[\w.*]+")
_JS = re.compile(rb"""(?:\bfrom|\bimport|\brequire|\.mock|\.doMock|\.requireActual|\.importActual|\.resolve)"""
                 rb"""\s*\(?\s*(?:'([^'\n]*)'|"([^"\n]*)"|`([^`]*)`)""")
_GO_END = re.compile(rb"^(?:func|type|var|const)\b", re.M)
_GO_IMPORT = re.compile(rb'^import\s*(?:\(([^)]*)\)|(?:[\w.]+\s+)?"([^"\n]+)")', re.M)
_GO_PATH = re.compile(rb'"([^"\n]+)"')
_GO_EMBED = re.compile(rb"^[ \t]*//go:embed[ \t]+(.+)$", re.M)
_GO_EMBED_PATTERN = re.compile(rb'"([^"]*)"|`([^`]*)`|(\S+)')
_JAVA_PACKAGE = re.compile(rb"^\s*package\s+([\w.]+)\s*;", re.M)
_JAVA_IMPORT = re.compile(rb"^\s*import\s+(?:static\s+)?([\w.]+(?:\.\*)?)\s*;", re.M)
_GO_MODULE = re.compile(rb"^\s*module\s+\"?([^\s\"]+)", re.M)
_JSON_NOISE = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)


def _names(text: bytes) -> list[str]:
    """`a.b as c, d` or `(a,\n b)`: the first word of each."""
    words = (w.split() for w in text.replace(b"\\\n", b" ").strip(b"() \t\r\n").decode("utf-8", "replace").split(","))
    return [w[0] for w in words if w and _WORD.fullmatch(w[0])]


def _py(data: bytes) -> Iterator[str]:
    for frm, names, plain in _PY.findall(data):
        if plain:
            yield from _names(plain)
        else:
            yield f"{frm.decode('utf-8', 'replace')}:{','.join(_names(names))}"
    yield from (m.decode("utf-8", "replace") for m in _PY_DYNAMIC.findall(data))


def _js(data: bytes) -> Iterator[str]:
    for single, double, template in _JS.findall(data):
        if template:
            yield "`" + template.partition(b"${")[0].decode("utf-8", "replace") if b"${" in template else \
                template.decode("utf-8", "replace")
        elif single or double:
            yield (single or double).decode("utf-8", "replace")


def _go(data: bytes) -> Iterator[str]:
    end = _GO_END.search(data)
    for block, one in _GO_IMPORT.findall(data[:end.start()] if end else data):
        for path in ([one] if one else _GO_PATH.findall(block)):
            yield "i:" + path.decode("utf-8", "replace")
    if b"go:embed" in data:
        for line in _GO_EMBED.findall(data):
            for parts in _GO_EMBED_PATTERN.findall(line):
                yield "e:" + b"".join(parts).decode("utf-8", "replace")


def _java(data: bytes) -> Iterator[str]:
    yield from ("p:" + m.decode() for m in _JAVA_PACKAGE.findall(data)[:1])
    yield from ("i:" + m.decode() for m in _JAVA_IMPORT.findall(data))


def _cargo(data: bytes) -> Iterator[str]:
    try:
        toml = tomllib.loads(data.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError:
        return
    package = toml.get("package")
    if isinstance(package, dict) and isinstance(package.get("name"), str):
        yield "n:" + package["name"]
    kinds = ("dependencies", "dev-dependencies", "build-dependencies", "dev_dependencies", "build_dependencies")
    tables = [toml.get(k) for k in kinds]
    targets = toml.get("target")
    tables += [t.get(k) for t in (targets.values() if isinstance(targets, dict) else ()) if isinstance(t, dict)
               for k in kinds]
    workspace = toml.get("workspace")
    shared = workspace.get("dependencies") if isinstance(workspace, dict) else None
    for tag, table in [*(("d", t) for t in tables), ("w", shared)]:
        for key, value in (table.items() if isinstance(table, dict) else ()):
            yield f"{tag}:{key}="
            if isinstance(value, dict):
                for part, letter in (("package", "k"), ("path", "p")):
                    if isinstance(value.get(part), str):
                        yield f"{tag}:{key}={letter}{value[part]}"


def _npm(data: bytes) -> Iterator[str]:
    with contextlib.suppress(ValueError):
        name = json.loads(data).get("name")
        if isinstance(name, str) and name:
            yield "n:" + name


def _gomod(data: bytes) -> Iterator[str]:
    yield from ("m:" + m.decode("utf-8", "replace") for m in _GO_MODULE.findall(data)[:1])


def _tsconfig(data: bytes) -> Iterator[str]:
    text = _JSON_NOISE.sub(lambda m: m.group(0) if m.group(0)[0] == '"' else "", data.decode("utf-8", "replace"))
    try:
        options = json.loads(re.sub(r",\s*([}\]])", r"\1", text)).get("compilerOptions") or {}
    except (ValueError, AttributeError):
        return
    base = options.get("baseUrl") if isinstance(options.get("baseUrl"), str) else None
    if base is not None:
        yield "b:" + base
    for alias, targets in (options.get("paths") or {}).items() if isinstance(options.get("paths"), dict) else ():
        if isinstance(targets, list):
            yield f"a:{alias}=" + "|".join(posixpath.join(base or ".", t) for t in targets if isinstance(t, str))


def _link(data: bytes) -> Iterator[str]:
    yield "l:" + data.decode("utf-8", "surrogateescape")


EXTRACT = {"link": _link, "py": _py, "js": _js, "go": _go, "java": _java, "cargo": _cargo, "npm": _npm, "gomod": _gomod,
           "tsconfig": _tsconfig}


def extract(kind: str, data: bytes) -> list[str]:
    """The import specifiers of one file's contents (strings, as the resolver takes them)."""
    if kind not in EXTRACT or b"\0" in data[:8000]:
        return []
    return sorted(set(EXTRACT[kind](data)))


# --- the cache ------------------------------------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS specs(sha TEXT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY(sha, kind)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS graphs(key TEXT PRIMARY KEY, used REAL NOT NULL, data BLOB NOT NULL);
"""


def db_path(repo: Path) -> Path:
    """Beside the symbol index: one per repository, shared by its lanes (worktrees map to their repository)."""
    index = symbols.default_db_path(repo)
    return index.with_name(index.stem + ".imports.sqlite")


def _version() -> str:
    """This module's text and the resolver's: a change to extraction or resolution makes every cached row stale."""
    here = Path(__file__)
    return hashlib.sha1(here.read_bytes() + here.with_name("resolve.py").read_bytes()).hexdigest()


class Cache:
    """Specifiers per (blob, kind) and graphs per tree, in SQLite (WAL: several processes read and write it)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        version = _version()
        if self.db.execute("SELECT value FROM meta WHERE key='version'").fetchone() != (version,):
            with self.write():
                self.db.execute("DELETE FROM specs")
                self.db.execute("DELETE FROM graphs")
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (version,))

    def close(self) -> None:
        self.db.close()

    def write(self) -> contextlib.AbstractContextManager[None]:
        return symbols.immediate(self.db)  # writers of several lanes take turns

    def specs(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        shas = sorted({sha for sha, _ in keys})
        for i in range(0, len(shas), _BATCH):
            chunk = shas[i:i + _BATCH]
            for sha, kind, data in self.db.execute(
                    f"SELECT sha, kind, data FROM specs WHERE sha IN ({','.join('?' * len(chunk))})", chunk):
                out[(sha, kind)] = data.split("\n") if data else []
        return out

    def put_specs(self, rows: list[tuple[str, str, list[str]]]) -> None:
        with self.write():
            self.db.executemany("INSERT OR IGNORE INTO specs VALUES (?, ?, ?)",
                                ((sha, kind, "\n".join(specs)) for sha, kind, specs in rows))

    def graph(self, key: str) -> bytes | None:
        row = self.db.execute("SELECT data FROM graphs WHERE key=?", (key,)).fetchone()
        if row:
            self.db.execute("UPDATE graphs SET used=? WHERE key=?", (time.time(), key))
        return row[0] if row else None

    def put_graph(self, key: str, data: bytes) -> None:
        with self.write():
            self.db.execute("INSERT OR REPLACE INTO graphs VALUES (?, ?, ?)", (key, time.time(), data))
            self.db.execute("DELETE FROM graphs WHERE key IN (SELECT key FROM graphs ORDER BY used DESC"
                            " LIMIT -1 OFFSET ?)", (KEEP_GRAPHS,))


# --- git --------------------------------------------------------------------------------------------------------------

def tree_of(repo: Path, rev: str) -> str:
    return symbols.git_output(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{tree}}").strip()


def entries(repo: Path, tree: str) -> tuple[dict[str, str], set[str]]:
    """path -> blob id of a tree's files (submodules left out: the graph does not enter them), and which of them
    are symbolic links."""
    out, links = {}, set()
    for record in symbols.git_output(repo, "ls-tree", "-r", "-z", "--full-tree", tree).split("\0"):
        meta, _, path = record.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob":
            out[path] = parts[2]
            if parts[0] == "120000":
                links.add(path)
    return out, links


def blob_id(data: bytes) -> str:
    """The id git gives these contents (a worktree file's cache key, as if committed)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def read_specs(repo: Path, cache: Cache, files: dict[str, str], links: set[str]) -> dict[str, list[str]]:
    """path -> specifiers of every file the graph reads, from the cache or (the rest) from git, cached after. A
    symbolic link's are its target ("l:target")."""
    kinds_of = {path: kind for path in files if (kind := "link" if path in links else kind_of(path)) in EXTRACT}
    wanted = {(files[path], kind) for path, kind in kinds_of.items()}
    known = cache.specs(sorted(wanted))
    todo = sorted(wanted - known.keys())
    if todo:
        kinds: dict[str, list[str]] = {}
        for sha, kind in todo:
            kinds.setdefault(sha, []).append(kind)
        rows = []
        with contextlib.closing(symbols.cat_blobs(repo, list(kinds))) as blobs:
            for sha, data in blobs:
                BLOBS_READ[0] += 1
                rows += [(sha, kind, extract(kind, data)) for kind in kinds[sha]]
        cache.put_specs(rows)
        known.update({(sha, kind): specs for sha, kind, specs in rows})
    return {path: known.get((sha, kinds_of[path]), []) if path in kinds_of else [] for path, sha in files.items()}
