"""The repository's structure from its code (reposwarm/intel/layout.py and friends) and `reposwarm lanes`: packages
per ecosystem, CODEOWNERS, the package import graph, per-package checks, and the starting lanes made from them,
on the multi-language fixtures, the bundled example and a generated monorepo of several hundred services. Real git
repositories in temporary folders, the real symbol index, the real command line."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.gen_monorepo import generate
from reposwarm.contracts.proposal import RepoLayout
from reposwarm.intel import lanesplit, layout, owners, packages
from reposwarm.lanes.checking import check_lanes
from reposwarm.lanes.loading import load_lanes_file
from reposwarm.slices.policy import PathPolicy
from reposwarm.symbols.index import SymbolIndex
from tests.helpers import ROOT, git

PYTHON = ("python3", True)  # (the interpreter question answered, so no test depends on this host's pytest)


def fixture_repo(tmp_path: Path, source: Path, name: str) -> Path:
    repo = tmp_path / name
    shutil.copytree(source, repo, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fixture")
    return repo


def surveyed(repo: Path, tmp_path: Path) -> RepoLayout:
    with SymbolIndex(repo, tmp_path / f"{repo.name}.sqlite") as index:
        return layout.survey(repo, index=index)


def by_path(found: RepoLayout) -> dict[str, object]:
    return {p.path: p for p in found.packages}


def written(found: RepoLayout, max_lanes: int = 8) -> str:
    config, notes = lanesplit.plan(found, max_lanes)
    return layout.lanes_yaml(found, config, notes)


def writers(repo: Path, text: str) -> dict[str, list[str]]:
    """Each tracked file and the lanes that may write it, as PathPolicy (every tool) decides."""
    lanes = yaml.safe_load(text)["swarm"]["lanes"]
    policies = {name: PathPolicy(repo, role["allowed_paths"], role.get("read_only_paths", []))
                for name, role in lanes.items()}
    files = git(repo, "ls-files").splitlines()
    return {f: [n for n, p in policies.items() if p.writable(f)] for f in files}


def loads_and_passes(repo: Path, text: str, tmp_path: Path, max_lanes: int = 8) -> None:
    path = tmp_path / f"{repo.name}-lanes.yaml"
    path.write_text(text)
    config = load_lanes_file(path)
    findings = check_lanes(config, git(repo, "ls-files").splitlines(), max_lanes=max_lanes, tools_on_path=False)
    assert findings.errors == []
    assert not [w for w in findings.warnings if "matches no" in w], findings.warnings


# --- the multi-language fixtures ----------------------------------------------------------------------------------


def test_the_fixtures_packages_per_ecosystem_their_imports_and_lanes(tmp_path):
    repo = fixture_repo(tmp_path, ROOT / "tests" / "fixtures" / "langs", "langs")
    found = surveyed(repo, tmp_path)
    pkgs = by_path(found)
    assert {p: (pkg.kind, pkg.name) for p, pkg in pkgs.items()} == {
        "go": ("go-module", "example.com/shapes"), "go/geometry": ("go-package", "example.com/shapes/geometry"),
        "rust": ("cargo", "shapes"), "python/shapes": ("python", "shapes"), "python": ("folder", "python"),
        "java": ("folder", "java"), "javascript": ("folder", "javascript"), "typescript": ("folder", "typescript")}
    # main.go uses the geometry package; app.py imports shapes
    assert pkgs["go"].imports == ["go/geometry"]
    assert pkgs["python"].imports == ["python/shapes"]
    assert sum(p.files for p in found.packages) == found.files == len(git(repo, "ls-files").splitlines())
    text = written(found)
    assert text == written(surveyed(repo, tmp_path))  # deterministic: a fresh survey, the same bytes
    lanes = yaml.safe_load(text)["swarm"]["lanes"]
    assert len(lanes) == 8
    assert lanes["go"]["depends_on"] == ["go-geometry"] and "depends_on" not in lanes["go-geometry"]
    assert lanes["python"]["depends_on"] == ["python-shapes"]
    assert lanes["go"]["allowed_paths"] == ["go/*", "!go/*/"]  # its own files, not the nested package's
    assert "go/geometry/" in lanes["go"]["read_only_paths"]  # and it reads what it imports
    assert all(len(w) == 1 for w in writers(repo, text).values())
    loads_and_passes(repo, text, tmp_path)


# --- the bundled example ------------------------------------------------------------------------------------------


def test_the_example_its_packages_checks_and_a_lanes_file_the_loader_takes(tmp_path):
    repo = fixture_repo(tmp_path, ROOT / "reposwarm" / "demo" / "repo", "demo")
    found = surveyed(repo, tmp_path)
    pkgs = by_path(found)
    assert sorted(pkgs) == ["", "clients/web", "db", "services"]
    web = pkgs["clients/web"]
    assert (web.kind, web.name, web.tests, web.check) == ("npm", "@taskboard/web", ["clients/web/test/"],
                                                          ["node", "--test", "clients/web/test/"])
    assert pkgs["db"].tests == ["db/tests/"] and pkgs["services"].tests == ["services/api/tests/"]
    assert "db" in pkgs["services"].imports  # services/api/tests imports db.migrate's connect
    # the whole repository's profile: Python at the root, and the npm package below it, which no root command runs
    assert found.profile is not None and ["node", "--test", "clients/web/test/"] in found.profile.commands
    text = written(found)
    assert text == written(found)
    lanes = yaml.safe_load(text)["swarm"]["lanes"]
    assert sorted(lanes) == ["clients-web", "db", "root", "services"]
    assert lanes["services"]["depends_on"] == ["db"] and "depends_on" not in lanes["db"]
    assert all(len(w) == 1 for w in writers(repo, text).values())
    loads_and_passes(repo, text, tmp_path)
    brief = layout.brief(found, focus=["db/migrate.py"])
    assert brief.splitlines()[3].startswith("- db/ [python db]")  # the focus's package first
    assert "node --test clients/web/test/" in brief


def test_reposwarm_lanes_writes_the_file_reads_the_commit_not_the_worktree_and_says_bad_input(tmp_path):
    repo = fixture_repo(tmp_path, ROOT / "reposwarm" / "demo" / "repo", "demo")
    (repo / "extra").mkdir()
    (repo / "extra" / "notes.py").write_text("x = 1\n")  # not committed: not part of the structure
    env = {**os.environ, "REPOSWARM_HOME": str(tmp_path / "home")}
    run = [sys.executable, "-m", "reposwarm.cli.main", "lanes", "--repo", str(repo)]
    out = subprocess.run([*run, "--out", str(tmp_path / "lanes.yaml")], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stderr
    text = (tmp_path / "lanes.yaml").read_text()
    assert text.startswith("# Lanes from the repository's structure")
    assert "extra" not in yaml.safe_load(text)["swarm"]["lanes"]
    printed = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert printed.returncode == 0 and printed.stdout == text  # the same tree, the same bytes
    load_lanes_file(tmp_path / "lanes.yaml")
    few = subprocess.run([*run, "--max-lanes", "2"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert few.returncode == 0 and len(yaml.safe_load(few.stdout)["swarm"]["lanes"]) == 2
    for bad, said in ((["--rev", "nope"], "error: --rev: 'nope' is not a revision"),
                      (["--max-lanes", "0"], "error: --max-lanes must be at least 1")):
        done = subprocess.run([*run, *bad], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert done.returncode == 2 and done.stderr.startswith(said), done.stderr
    helped = subprocess.run([*run[:4], "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    for option in ("--repo", "--out", "--max-lanes", "--rev"):
        assert option in helped.stdout


# --- the ecosystems' manifests ------------------------------------------------------------------------------------


MANIFESTS = {
    "package.json": '{"name": "mono", "workspaces": ["web/*", "!web/legacy"]}',
    "web/app/package.json": '{"name": "@m/app", "scripts": {"test": "vitest"}}',
    "web/app/src/main.ts": "export const a = 1;\n",
    "web/legacy/package.json": '{"name": "@m/legacy"}',
    "web/legacy/index.js": "module.exports = 1;\n",
    "pnpm/pnpm-workspace.yaml": "packages: ['x']\n",  # (not at the root: not the repository's workspace file)
    "Cargo.toml": '[workspace]\nmembers = ["crates/*"]\nexclude = ["crates/skip"]\n',
    "crates/core/Cargo.toml": '[package]\nname = "m-core"\n',
    "crates/core/src/lib.rs": "pub fn f() {}\n",
    "crates/skip/Cargo.toml": '[package]\nname = "m-skip"\n',
    "crates/skip/src/lib.rs": "pub fn g() {}\n",
    "py/tool/pyproject.toml": '[project]\nname = "m-tool"\n',
    "py/tool/tests/test_tool.py": "def test_x():\n    pass\n",
    "py/old/setup.cfg": "[metadata]\nname = m-old\n",
    "py/old/setup.py": "from setuptools import setup\nsetup()\n",
    "go/svc/go.mod": "module example.com/svc\n\ngo 1.21\n",
    "go/svc/api/api.go": "package api\n",
    "go/svc/api/api_test.go": "package api\n",
    "build/BUILD.bazel": "",
    "buck/BUCK": "",
    "tests/fixtures/x/package.json": '{"name": "a fixture, not a package"}',
    "tests/test_all.py": "def test_all():\n    pass\n",
    "docs/index.md": "# docs\n",
}


def test_each_ecosystems_packages_names_workspaces_and_checks():
    found, notes = packages.find_packages(list(MANIFESTS), MANIFESTS.get, lambda: PYTHON)
    got = {p.path: (p.kind, p.name, p.check) for p in found}
    assert got["web/app"] == ("npm", "@m/app", ["npx", "vitest", "run", "--root", "web/app"])
    assert got["web/legacy"][:2] == ("npm", "@m/legacy")
    assert got["crates/core"] == ("cargo", "m-core", ["cargo", "test", "--offline", "-p", "m-core"])  # a member
    assert got["crates/skip"][2] == ["cargo", "test", "--offline", "--manifest-path", "crates/skip/Cargo.toml"]
    assert got["crates/skip"][:2] == ("cargo", "m-skip")
    assert got["py/tool"] == ("python", "m-tool", ["python3", "-m", "pytest", "-q", "py/tool"])
    assert got["py/old"][:2] == ("python", "m-old")
    assert got["go/svc"] == ("go-module", "example.com/svc", ["go", "-C", "go/svc", "test", "./..."])
    assert got["go/svc/api"] == ("go-package", "example.com/svc/api", ["go", "-C", "go/svc", "test", "./api/..."])
    assert got["build"] == ("bazel", "//build", ["bazel", "test", "//build/..."])
    assert got["buck"] == ("buck", "//buck", ["buck2", "test", "//buck/..."])
    assert got["tests"][:2] == ("folder", "tests") and by_path_tests(found)["tests"] == ["tests/"]
    assert got["docs"][:2] == ("folder", "docs")
    assert "tests/fixtures/x" not in got
    assert any("1 workspace member(s)" in n for n in notes if n.startswith("2 npm"))
    members = {p.path for p in found if p.kind == "cargo"}
    assert members == {"", "crates/core", "crates/skip"}
    assert got[""][2] == ["cargo", "test", "--offline"]  # the workspace's own manifest: all its crates
    # pants: the same BUILD files, with a pants.toml at the root
    pants, _ = packages.find_packages(["pants.toml", "src/BUILD", "src/a.py"], {}.get, lambda: PYTHON)
    assert [(p.path, p.kind, p.check) for p in pants if p.path == "src"] == [("src", "pants",
                                                                               ["pants", "test", "src::"])]
    # every file is one package's, and the packages' own patterns give each file exactly one package
    patterns = {p.path: PathPolicy("/nonexistent", p.paths) for p in found}
    for path in MANIFESTS:
        assert sum(pol.writable(path) for pol in patterns.values()) == 1, path


def lane_writing(lanes: dict, repo: Path, folder: str) -> str:
    """The lane that may write a new file in a package's folder."""
    path = f"{folder}/new_file.py" if folder else "new_file.py"
    who = [n for n, r in lanes.items() if PathPolicy(repo, r["allowed_paths"], r.get("read_only_paths", [])
                                                     ).writable(path)]
    assert len(who) == 1, (folder, who)
    return who[0]


def after(lanes: dict, name: str) -> set[str]:
    """Every lane `name` waits for, directly or through another."""
    seen: set[str] = set()
    todo = list(lanes[name].get("depends_on", []))
    while todo:
        lane = todo.pop()
        if lane not in seen:
            seen.add(lane)
            todo += lanes[lane].get("depends_on", [])
    return seen


def by_path_tests(found):
    return {p.path: p.tests for p in found}


def test_codeowners_as_github_reads_it():
    rules = owners.CodeOwners("\n".join([
        "# comment", "* @everyone", "/services/ @svc-team", "services/pay*/ @pay-team # a comment",
        "*.md @docs", "/services/payroll/legacy/", "docs/** @writers", "!negated @x", "apps/ @apps"]))
    assert rules.owners("README") == ("@everyone",)
    assert rules.owners("services/api/a.py") == ("@svc-team",)
    assert rules.owners("services/payments/a.py") == ("@pay-team",)
    assert rules.owners("services/payments/README.md") == ("@docs",)  # the last matching line wins
    assert rules.owners("services/payroll/legacy/x.py") == ()  # a line with no owners: unowned
    assert rules.owners("docs/a/b.txt") == ("@writers",)
    assert rules.owners("x/apps/y.js") == ("@apps",)  # "apps/" matches a folder anywhere
    assert any("negated" in p for p in rules.problems)
    tree = {".github/CODEOWNERS": "* @first", "CODEOWNERS": "* @second"}
    found = owners.find(tree, tree.get)
    assert found is not None and found.where == ".github/CODEOWNERS" and found.owners("a") == ("@first",)


def test_cycles_between_lanes_are_broken_deterministically_keeping_the_strongest():
    notes: list[str] = []
    edges = {("a", "b"): 5, ("b", "c"): 3, ("c", "a"): 1, ("a", "c"): 2}
    after = lanesplit.depends(["a", "b", "c"], edges, notes)
    assert after == {"a": ["b"], "b": ["c"], "c": []}  # c -> a (the weakest) left out; a -> c is implied
    assert any("c -> a" in n for n in notes)
    assert lanesplit.depends(["a", "b", "c"], dict(reversed(list(edges.items()))), []) == after


def test_globs_for_runs_of_services_name_no_other_service():
    names = {"alpha", "alps", "beta", "bravo", "carol"}
    globs = lanesplit.compress({"alpha", "beta", "bravo"}, names - {"alpha", "beta", "bravo"})
    hit = {n for n in names if any(fnmatch.fnmatchcase(n, g) for g in globs)}
    assert hit == {"alpha", "beta", "bravo"}


# --- a generated monorepo of several hundred services -------------------------------------------------------------


TEAMS = {"a": "@team-ab", "b": "@team-ab", "c": "@team-c", "p": "@team-p", "r": "@team-r", "s": "@team-s"}


@pytest.fixture(scope="module")
def monorepo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("mono") / "repo"
    generate(repo, 300, 3, 24, seed=11)
    services = sorted(p.name for p in (repo / "services").iterdir())
    lines = ["* @platform"] + [f"/services/{letter}*/ {team}" for letter, team in sorted(TEAMS.items())]
    (repo / ".github").mkdir()
    (repo / ".github" / "CODEOWNERS").write_text("\n".join(lines) + "\n")
    target = next(s for s in services if (repo / "services" / s / "__init__.py").exists())
    module = sorted(p.stem for p in (repo / "services" / target).glob("*.py") if p.stem != "__init__")[0]
    text = (repo / "services" / target / f"{module}.py").read_text()
    func = next(line.split("def ", 1)[1].split("(")[0] for line in text.splitlines() if line.startswith("def "))
    (repo / "tests").mkdir()
    (repo / "tests" / "test_e2e.py").write_text(
        f"from services.{target}.{module} import {func}\n\n\ndef test_it():\n    assert {func}(3) >= 0\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "owners and end-to-end tests")
    with SymbolIndex(repo, repo.parent / "index.sqlite") as index:
        found = layout.survey(repo, index=index)
    return repo, found, target


def test_a_monorepo_of_hundreds_of_services_in_eight_lanes(monorepo, tmp_path):
    repo, found, target = monorepo
    kinds = {p.kind for p in found.packages}
    assert {"go-module", "go-package", "python", "folder"} <= kinds
    assert len([p for p in found.packages if p.path.startswith("services/")]) == 300
    text = written(found)
    lanes = yaml.safe_load(text)["swarm"]["lanes"]
    assert len(lanes) == 8
    # every tracked file is exactly one lane's to write: disjoint slices, inside the repository, nothing left out
    assert {f: w for f, w in writers(repo, text).items() if len(w) != 1} == {}
    loads_and_passes(repo, text, tmp_path)
    config, _ = lanesplit.plan(found, 8)
    files = git(repo, "ls-files").splitlines()
    assert check_lanes(config, files, max_lanes=8, tools_on_path=False).errors == []
    # leaf first: libs/common (which every service imports) goes before the services' lanes
    lane_of = {p.path: lane_writing(lanes, repo, p.path) for p in found.packages}
    libs = lane_of["libs/common"]
    for path, name in lane_of.items():
        if path.startswith("services/"):
            assert libs in after(lanes, name), (path, name)
    # the end-to-end tests live apart: a test lane, after the lane of the service they import
    assert lanes["tests"]["allowed_paths"] == ["tests/"]
    assert lane_of[f"services/{target}"] in after(lanes, "tests")
    assert text == written(found)


def test_a_lane_stays_inside_one_owner_area_when_there_are_lanes_enough(monorepo):
    _, found, _ = monorepo
    config, _ = lanesplit.plan(found, 8)
    areas = {tuple(p.owners) for p in found.packages}
    assert ("@team-ab",) in areas and ("@platform",) in areas
    lanes = yaml.safe_load(layout.lanes_yaml(found, config))["swarm"]["lanes"]
    held: dict[str, set[tuple[str, ...]]] = {}
    for pkg in found.packages:
        held.setdefault(lane_writing(lanes, Path("/x"), pkg.path), set()).add(tuple(pkg.owners))
    assert len(held) == 8 and all(len(areas) == 1 for areas in held.values()), held
    # with two lanes, areas must share: said in the notes
    _, notes = lanesplit.plan(found, 2)
    assert any("owner areas" in n for n in notes)


def test_the_brief_is_bounded_and_puts_the_focus_first(monorepo):
    _, found, target = monorepo
    text = layout.brief(found, focus=[f"services/{target}/x.py"])
    assert len(text) <= layout.BRIEF_CHARS
    assert text.splitlines()[3].startswith(f"- services/{target}/")
    assert "more packages" in text.splitlines()[-1]
