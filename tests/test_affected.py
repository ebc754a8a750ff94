"""Affected-test selection (reposwarm/checks/selection/affected.py) on small real repositories, one per language: a change
selects exactly the tests that import it (transitively), a change the graph cannot see through falls back and
says which file and why, documentation is ignored, and a warm answer reads no blob."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from reposwarm.checks.selection import affected, imports, resolve
from tests.helpers import git, make_repo

PYTHON = {
    "pkg/__init__.py": "",
    "pkg/core.py": "def f():\n    return 1\n",
    "pkg/mid.py": "from pkg.core import f\n",
    "pkg/leaf.py": "from . import mid\n",
    "app/__init__.py": "",
    "app/main.py": "import pkg.leaf\n",
    "app/other.py": "X = 1\n",
    "helpers_lib.py": "Y = 2\n",
    "tests/test_core.py": "from pkg.core import f\n",
    "tests/test_mid.py": "from pkg import mid\n",
    "tests/test_app.py": "from app.main import *  # noqa\n",
    "tests/test_other.py": "import app.other\n",
    "tests/sub/conftest.py": "import helpers_lib\n",
    "tests/sub/test_sub.py": "def test_x():\n    pass\n",
    "tests/data/golden.json": "{}\n",
    "tests/test_golden.py": "GOLDEN = 'tests/data/golden.json'\n",
    "tests/test_tool.py": "import subprocess\nsubprocess.run(['ruby', 'lib/tool.rb'])\n",
    "lib/tool.rb": "puts 1\n",
    "scripts/run.sh": "echo hi\n",
    "config/settings.yaml": "a: 1\n",
    "README.md": "# x\n",
    "docs/guide.md": "guide\n",
    "pyproject.toml": "[project]\nname = 'x'\n",
}
JS = {
    "package.json": '{"name": "root", "workspaces": ["packages/*"]}\n',
    "packages/util/package.json": '{"name": "@acme/util"}\n',
    "packages/util/src/index.ts": "export * from './strings';\n",
    "packages/util/src/strings.ts": "export const s = 1;\n",
    "packages/util/src/strings.test.ts": "import { s } from './strings';\n",
    "packages/app/package.json": '{"name": "@acme/app"}\n',
    "packages/app/src/main.js": "const u = require('@acme/util');\nrequire('./styles.css');\nmodule.exports = u;\n",
    "packages/app/src/styles.css": "body {}\n",
    "packages/app/src/lazy.mjs": "export const load = (n) => import(`./locales/${n}.js`);\n",
    "packages/app/src/locales/en.js": "export default {};\n",
    "packages/app/src/esm.ts": "export default 1;\n",
    "packages/app/src/main.test.js": "const m = require('./main');\n",
    "packages/app/src/lazy.test.mjs": "import { load } from './lazy.mjs';\n",
    "packages/app/__tests__/esm.ts": "import x from '../src/esm.js';\n",
    "jest.config.js": "module.exports = { setupFiles: ['./jest.setup.js'] };\n",
    "jest.setup.js": "globalThis.x = 1;\n",
    "packages/app/vitest.config.mjs": "export default { test: { setupFiles: ['./setup-app.js'] } };\n",
    "packages/app/setup-app.js": "globalThis.y = 1;\n",
    "tsconfig.json": '{\n  // aliases\n  "compilerOptions": {"baseUrl": ".", "paths": {"@lib/*": ["packages/util/src/*"]},},\n}\n',
    "packages/app/src/alias.test.ts": "import { s } from '@lib/strings';\n",
}
GO = {
    "go.mod": "module example.com/m\n\ngo 1.21\n",
    "calc/calc.go": "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
    "calc/extra.go": "package calc\n",
    "calc/calc_test.go": 'package calc\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {}\n',
    "calc/testdata/cases.txt": "1 2 3\n",
    "api/api.go": 'package api\n\nimport (\n\t"fmt"\n\n\t"example.com/m/calc"\n)\n\nvar _ = fmt.Sprint(calc.Add(1, 2))\n',
    "api/api_test.go": 'package api_test\n\nimport "testing"\n\nfunc TestAPI(t *testing.T) {}\n',
    "web/web.go": 'package web\n\nimport _ "embed"\n\n//go:embed static/*\nvar page string\n',
    "web/static/index.html": "<html></html>\n",
    "web/web_test.go": "package web\n",
    "other/other.go": "package other\n",
    "other/other_test.go": "package other\n",
}
CARGO = {
    "Cargo.toml": '[workspace]\nmembers = ["crates/*"]\n\n[workspace.dependencies]\ncore = { path = "crates/core" }\n',
    "crates/core/Cargo.toml": '[package]\nname = "core"\nversion = "0.1.0"\n',
    "crates/core/src/lib.rs": "pub fn one() -> i32 { 1 }\n",
    "crates/app/Cargo.toml": '[package]\nname = "app"\nversion = "0.1.0"\n\n[dependencies]\ncore = { workspace = true }\n',
    "crates/app/src/main.rs": "fn main() {}\n",
    "crates/tool/Cargo.toml": '[package]\nname = "tool-x"\n\n[dev-dependencies]\nmine = { package = "core", path = "../core" }\n',
    "crates/tool/src/lib.rs": "\n",
    "crates/solo/Cargo.toml": '[package]\nname = "solo"\n',
    "crates/solo/src/lib.rs": "\n",
    "crates/solo/README.md": "solo\n",
}
JAVA = {
    "src/main/java/com/acme/util/Strings.java": "package com.acme.util;\npublic class Strings {}\n",
    "src/main/java/com/acme/util/Numbers.java": "package com.acme.util;\nclass Numbers {}\n",
    "src/main/java/com/acme/app/App.java": "package com.acme.app;\n\nimport com.acme.util.Strings;\n",
    "src/main/java/com/acme/app/Star.java": "package com.acme.other;\n\nimport com.acme.util.*;\n",
    "src/test/java/com/acme/app/AppTest.java": "package com.acme.app;\n\nclass AppTest {}\n",
    "src/main/java/com/acme/lone/Lone.java": "package com.acme.lone;\n",
}


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def repo_of(tmp_path: Path, files: dict[str, str], name: str = "repo") -> Path:
    return make_repo(tmp_path / name, files)


def names(repo: Path, *changed: str, **kwargs: Path) -> dict[str, list[str]]:
    found = affected.affected(repo, "HEAD", changed, **kwargs)
    assert found.names is not None, found.fallback
    return {kind: tests for kind, tests in found.names.items() if tests}


def fallback(repo: Path, *changed: str) -> str:
    found = affected.affected(repo, "HEAD", changed)
    assert found.names is None and found.why == {}
    return found.fallback


# --- per language ---------------------------------------------------------------------------------------------------

def test_python_selects_the_importers_tests_transitively(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, PYTHON)
    assert names(repo, "pkg/leaf.py") == {"python": ["tests/test_app.py"]}  # app.main imports it
    shared = affected.affected(repo, "HEAD", ["pkg/core.py"])
    assert shared.names == {"python": ["tests/test_app.py", "tests/test_core.py", "tests/test_mid.py"],
                            "js": [], "go": [], "cargo": []}
    assert shared.why == dict.fromkeys(shared.names["python"], "pkg/core.py")
    assert shared.tests["python"] == 7 and shared.changed == ("pkg/core.py",)
    # a package's __init__.py runs for every module below it; a test reads the conftest.py above it
    assert names(repo, "pkg/__init__.py") == {"python": ["tests/test_app.py", "tests/test_core.py",
                                                         "tests/test_mid.py"]}
    assert names(repo, "helpers_lib.py") == {"python": ["tests/sub/test_sub.py"]}
    assert names(repo, "tests/test_other.py") == {"python": ["tests/test_other.py"]}
    assert names(repo, "app/other.py", "pkg/leaf.py") == {"python": ["tests/test_app.py", "tests/test_other.py"]}


def test_js_resolves_relative_workspace_and_template_imports(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, JS)
    assert names(repo, "packages/util/src/strings.ts") == {  # @acme/util -> its files; @lib/* -> tsconfig's paths
        "js": ["packages/app/src/alias.test.ts", "packages/app/src/main.test.js", "packages/util/src/strings.test.ts"]}
    assert names(repo, "packages/app/src/main.js") == {"js": ["packages/app/src/main.test.js"]}
    assert names(repo, "packages/app/src/locales/en.js") == {"js": ["packages/app/src/lazy.test.mjs"]}
    assert names(repo, "packages/app/src/esm.ts") == {"js": ["packages/app/__tests__/esm.ts"]}  # './esm.js' is .ts
    assert names(repo, "packages/app/src/styles.css") == {"js": ["packages/app/src/main.test.js"]}
    assert affected.all_tests(repo, "HEAD")["js"] == [
        "packages/app/__tests__/esm.ts", "packages/app/src/alias.test.ts", "packages/app/src/lazy.test.mjs",
        "packages/app/src/main.test.js", "packages/util/src/strings.test.ts"]
    assert "jest.setup.js: named by jest.config.js, test configuration" in fallback(repo, "jest.setup.js")
    assert "named by packages/app/vitest.config.mjs" in fallback(repo, "packages/app/setup-app.js")


def test_go_selects_packages_by_import_path(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, GO)
    assert affected.all_tests(repo, "HEAD")["go"][:1] == ["example.com/m/api"]
    assert names(repo, "calc/extra.go") == {"go": ["example.com/m/api", "example.com/m/calc"]}
    assert names(repo, "api/api.go") == {"go": ["example.com/m/api"]}
    assert names(repo, "calc/calc_test.go") == {"go": ["example.com/m/calc"]}
    assert names(repo, "calc/testdata/cases.txt") == {"go": ["example.com/m/calc"]}  # its tests' testdata/
    assert names(repo, "web/static/index.html") == {"go": ["example.com/m/web"]}  # //go:embed static/*
    assert affected.all_tests(repo, "HEAD")["go"] == ["example.com/m/api", "example.com/m/calc", "example.com/m/other",
                                                      "example.com/m/web"]
    assert fallback(repo, "go.sum").startswith("go.sum: a package manifest or lock file")


def test_cargo_selects_crates_by_their_workspace_dependencies(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, CARGO)
    every = affected.all_tests(repo, "HEAD")  # before any graph is built: from the listing and manifests alone
    assert every["cargo"] == ["app", "core", "solo", "tool-x"]
    assert names(repo, "crates/core/src/lib.rs") == {"cargo": ["app", "core", "tool-x"]}
    assert names(repo, "crates/app/src/main.rs") == {"cargo": ["app"]}
    assert affected.all_tests(repo, "HEAD") == every  # from the graph now
    assert affected.affected(repo, "HEAD", ["crates/solo/README.md"]).ignored == ("crates/solo/README.md",)
    assert fallback(repo, "Cargo.lock").startswith("Cargo.lock: a package manifest or lock file")


def _reach(repo: Path, path: str) -> set[str]:
    graph = resolve.load(repo, "HEAD")
    readers, seen, todo = graph.readers(), {graph.index[path]}, [graph.index[path]]
    while todo:
        for reader in readers[todo.pop()]:
            if reader not in seen:
                seen.add(reader)
                todo.append(reader)
    return {graph.names[n] for n in seen if n < graph.files}


def test_java_imports_wildcards_and_same_package_files(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, JAVA)
    root = "src/main/java/com/acme/"
    assert _reach(repo, root + "util/Strings.java") == {root + "util/Strings.java", root + "util/Numbers.java",
                                                        root + "app/App.java", root + "app/Star.java",
                                                        "src/test/java/com/acme/app/AppTest.java"}
    assert _reach(repo, root + "app/App.java") == {root + "app/App.java", "src/test/java/com/acme/app/AppTest.java"}
    assert _reach(repo, root + "lone/Lone.java") == {root + "lone/Lone.java"}


# --- what the graph cannot see through ------------------------------------------------------------------------------

def test_fallbacks_name_the_file_and_why(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, {**PYTHON, "BUILD.bazel": "", "api/v1/service.proto": "", "yarn.lock": ""})
    assert fallback(repo, "BUILD.bazel") == "BUILD.bazel: a build file: the import graph cannot see what it changes"
    assert fallback(repo, "pkg/core.py", "yarn.lock").startswith("yarn.lock: a package manifest or lock file")
    assert fallback(repo, "pyproject.toml", "BUILD.bazel").endswith("(and 1 more such change)")
    assert fallback(repo, "tests/sub/conftest.py").startswith("tests/sub/conftest.py: test configuration")
    assert fallback(repo, "api/v1/service.proto").startswith("api/v1/service.proto: a code generation input")
    assert fallback(repo, "scripts/run.sh") == ("scripts/run.sh: a file of a kind the import graph does not parse, "
                                                "and no code names it: it may still be read")
    assert fallback(repo, "config/settings.yaml").startswith("config/settings.yaml: a file of a kind")
    assert fallback(repo, "Makefile", "pkg/core.py").startswith("Makefile: a build file")  # (deleted or not: a name)
    assert fallback(repo, "lib/x").startswith("lib/x: a name too short to search the code for")
    found = affected.affected(repo, "HEAD", ["scripts/run.sh"])
    assert found.tests["python"] == 7  # the counts are said even when falling back


def test_a_symbolic_link_reads_its_target(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, {**PYTHON, "shared/conf.py": "Z = 1\n", "tests/test_conf.py": "from app.conf import Z\n"})
    (repo / "app/conf.py").symlink_to("../shared/conf.py")
    git(repo, "add", "app/conf.py")
    git(repo, "commit", "-qm", "link")
    assert names(repo, "shared/conf.py") == {"python": ["tests/test_conf.py"]}


def test_a_file_a_test_names_selects_that_test_and_docs_are_ignored(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, PYTHON)
    assert names(repo, "tests/data/golden.json") == {"python": ["tests/test_golden.py"]}
    assert names(repo, "lib/tool.rb") == {"python": ["tests/test_tool.py"]}  # a language the graph does not parse
    docs = affected.affected(repo, "HEAD", ["README.md", "docs/guide.md"])
    assert docs.names == {"python": [], "js": [], "go": [], "cargo": []}
    assert docs.ignored == ("README.md", "docs/guide.md") and docs.fallback == ""


# --- changes and worktrees -----------------------------------------------------------------------------------------

def test_a_deleted_or_renamed_files_importers_are_affected(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, PYTHON)
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "mv", "pkg/mid.py", "pkg/middle.py")
    git(repo, "commit", "-qm", "rename")
    changed = affected.changed_files(repo, base, "HEAD")
    assert changed == ["pkg/mid.py", "pkg/middle.py"]
    # the new tree's importers of the old name are broken now: they are what must run
    assert affected.affected(repo, "HEAD", changed).names == {
        "python": ["tests/test_app.py", "tests/test_mid.py"], "js": [], "go": [], "cargo": []}
    assert affected.affected(repo, base, changed).names == {
        "python": ["tests/test_app.py", "tests/test_mid.py"], "js": [], "go": [], "cargo": []}


def test_worktree_changes_and_an_untracked_test(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, {**PYTHON, ".gitignore": "*.log\n"})
    base = git(repo, "rev-parse", "HEAD")
    (repo / "app/other.py").write_text("X = 2\n")
    git(repo, "add", "app/other.py")
    git(repo, "commit", "-qm", "other")
    (repo / "pkg/leaf.py").write_text("from . import mid\nZ = 1\n")  # uncommitted
    (repo / "tests/test_new.py").write_text("from pkg.leaf import Z\n")  # untracked
    (repo / "run.log").write_text("ignored\n")
    changed = affected.worktree_changes(repo, base)
    assert changed == ["app/other.py", "pkg/leaf.py", "tests/test_new.py"]
    assert names(repo, *changed, worktree=repo) == {
        "python": ["tests/test_app.py", "tests/test_new.py", "tests/test_other.py"]}
    (repo / "tests/test_reads.py").write_text("SETTINGS = 'config/settings.yaml'\n")  # untracked, names a data file
    assert fallback(repo, "config/settings.yaml").startswith("config/settings.yaml: a file of a kind")
    assert names(repo, "config/settings.yaml", "tests/test_reads.py", worktree=repo) == {
        "python": ["tests/test_reads.py"]}
    (repo / "tests/test_other.py").unlink()  # a test the change deletes is not one to run
    assert names(repo, "app/other.py", "tests/test_other.py", worktree=repo) == {}


def test_a_java_file_moved_into_a_package_in_the_worktree(tmp_path: Path) -> None:
    repo = repo_of(tmp_path, {**JAVA, "src/main/java/com/acme/app/Moved.java": "package com.acme.lone;\n"})
    (repo / "src/main/java/com/acme/app/Moved.java").write_text("package com.acme.app;\n")
    graph = resolve.load(repo, "HEAD")
    assert graph.index["src/main/java/com/acme/app/Moved.java"] not in graph.readers()[graph.index["//java/com.acme.app"]]
    edges = affected._worktree_edges(repo, ["src/main/java/com/acme/app/Moved.java"])
    assert ("//java/com.acme.app", "src/main/java/com/acme/app/Moved.java") in edges


# --- the cache -----------------------------------------------------------------------------------------------------

def test_a_warm_answer_reads_no_blob(tmp_path: Path, home: Path) -> None:
    repo = repo_of(tmp_path, PYTHON)
    before = imports.BLOBS_READ[0]
    first = affected.affected(repo, "HEAD", ["pkg/core.py"])
    read = imports.BLOBS_READ[0] - before
    # each blob the graph parses, once (empty files and copies are one blob)
    assert read == len({imports.blob_id(t.encode()) for p, t in PYTHON.items() if imports.kind_of(p) in imports.EXTRACT})
    db = imports.db_path(repo)
    assert db.parent.parent == home and db.name.endswith(".imports.sqlite")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM specs").fetchone()[0] == read
        conn.execute("DELETE FROM graphs")  # the resolved graph goes: specs alone rebuild it, still no blob read
    assert affected.affected(repo, "HEAD", ["pkg/core.py"]) == first
    assert affected.affected(repo, "HEAD", ["pkg/core.py", "pkg/new.py"]).names == first.names
    assert imports.BLOBS_READ[0] - before == read
    (repo / "pkg/core.py").write_text("def f():\n    return 2\n")
    git(repo, "commit", "-qam", "core")
    affected.affected(repo, "HEAD", ["pkg/core.py"])
    assert imports.BLOBS_READ[0] - before == read + 1  # a new commit parses only the blob it changed


def test_extraction_reads_each_language(tmp_path: Path) -> None:
    assert imports.extract("py", b"import a.b as c, d\nfrom ..x import (y,\n  z)\nfrom . import w\n"
                                 b"m = importlib.import_module('p.q')\n") == ["..x:y,z", ".:w", "a.b", "d", "p.q"]
    assert imports.extract("js", b"import a from './a';\nexport * from \"b\";\nconst c = require('c');\n"
                                 b"await import(`./l/${x}.js`);\njest.mock('./m');\n") == ["./a", "./m", "`./l/", "b", "c"]
    assert imports.extract("go", b'package x\n\nimport (\n\tf "fmt"\n\t"a/b"\n)\n\n//go:embed t/*.txt\nvar s string\n'
                                 b'func F() { _ = "import \\"no\\"" }\n') == ["e:t/*.txt", "i:a/b", "i:fmt"]
    assert imports.extract("java", b"package a.b;\nimport static c.D.e;\nimport f.*;\n") == \
        ["i:c.D.e", "i:f.*", "p:a.b"]
    assert imports.extract("py", b"\0binary") == []


def test_a_command_whose_tests_selection_cannot_name_runs_whole(tmp_path: Path) -> None:
    """`unittest discover -s DIR` without `-t .` names its tests relative to DIR, which no selector can give: the
    plan cannot tell which tests it runs, so it runs the command whole (never "none affected": a check of zero
    tests), and the remainder does not run it again."""
    from reposwarm.checks.selection import plans
    from reposwarm.contracts import CheckProfile

    repo = make_repo(tmp_path / "repo", {"packages/tiny/tiny/__init__.py": "def f():\n    return 1\n",
                                         "packages/tiny/tests/__init__.py": "",
                                         "packages/tiny/tests/test_tiny.py": "from tiny import f\n",
                                         "packages/tiny/tests/test_other.py": "X = 1\n"})
    head = git(repo, "rev-parse", "HEAD").strip()
    argv = ["python3", "-m", "unittest", "discover", "-s", "packages/tiny/tests"]
    profile = CheckProfile(commands=[argv])
    changed = ["packages/tiny/tiny/__init__.py"]
    selected = plans.plan(repo, head, head, profile, "affected", lambda a: {}, changed=changed)
    assert [p.whole for p in selected.parts] == [[" ".join(argv)]]
    assert "cannot tell which of the tree's tests it runs" in selected.fallback
    rest = plans.plan(repo, head, head, profile, "remainder", lambda a: {}, changed=changed)
    assert rest.parts == [] and "ran whole in the selected check" in rest.skipped[0]
    # with `-t .` its tests are named from the root: only the affected ones run, as before
    rooted = CheckProfile(commands=[[*argv, "-t", "."]])
    narrow = plans.plan(repo, head, head, rooted, "affected", lambda a: {}, changed=changed)
    assert [p.names for p in narrow.parts] == [{" ".join([*argv, "-t", "."]): ["packages/tiny/tests/test_tiny.py"]}]
