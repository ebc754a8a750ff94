"""Selection by the repository's own build tool (reposwarm/checks/selection/toolselect.py), in the real sandbox: go for real on
a small module; bazel, nx, turbo and pants (not installed here) as small fake programs that print what the real
tool's query prints and record the argv they were given, so each test proves what reposwarm ran, and that a tool's
failure, a path that is no safe datum, or a change the tool cannot place runs the command whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reposwarm.checks import sandbox
from reposwarm.checks.runner import prepared_tree, run_command
from reposwarm.checks.selection import toolselect
from reposwarm.checks.selection.toolselect import Chosen, select
from reposwarm.contracts import CheckProfile

HAS_GO = shutil.which("go") is not None
SINCE = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rshome")  # (one per module: the go cache the first check fills, the next reuse)


@pytest.fixture(autouse=True)
def _sandboxed(home, monkeypatch):
    monkeypatch.setenv("REPOSWARM_HOME", str(home))
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    monkeypatch.delenv(sandbox.BWRAP, raising=False)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


RECORD = '#!/bin/sh\n{ for a in "$@"; do printf "%s\\n" "$a"; done; echo ---; } >> "$PWD/calls.log"\n'


def fake(tmp: Path, name: str, body: str) -> CheckProfile:
    """A program `name` on a folder only the sandbox's PATH names: it records its argv in the tree's calls.log."""
    folder = tmp / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(RECORD + body)
    (folder / name).chmod(0o755)
    return CheckProfile(commands=[["true"]], timeout_s=60, read_only_paths=[str(folder)],
                        env={"PATH": f"{folder}:/usr/bin:/bin"})


def calls(root: Path) -> list[list[str]]:
    log = root / "calls.log"
    text = log.read_text() if log.exists() else ""
    return [c.strip("\n").split("\n") for c in text.split("---\n") if c.strip("\n")]


async def chosen_and_run(selector: str, argv: list[str], changed: list[str], root: Path, profile: CheckProfile,
                         since: str = SINCE) -> tuple[Chosen, str]:
    """select() in the tree the checks run in (its caches and report folder), then the chosen command there."""
    async with prepared_tree(profile, root, None, readable=None, scope="base", reports=True) as (tree, _):
        chosen = await select(selector, argv, changed, since, tree, profile, None)
        if chosen.argv is None:
            return chosen, ""
        result, output = await run_command(chosen.argv, tree, profile, 120, None)
        assert result.exit_code == 0, output
        return chosen, output


async def choose(selector: str, argv: list[str], changed: list[str], root: Path, profile: CheckProfile,
                 since: str = SINCE) -> Chosen:
    async with prepared_tree(profile, root, None, readable=None, scope="base", reports=True) as (tree, _):
        return await select(selector, argv, changed, since, tree, profile, None)


# --- go, for real --------------------------------------------------------------------------------------------------

MODULE = {
    "go.mod": "module example.com/m\n\ngo 1.19\n",
    "lib/lib.go": "package lib\n\nfunc Add(a, b int) int { return a + b }\n",
    "lib/lib_test.go": 'package lib\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n'
                       '\t\tt.Fatal("1+2")\n\t}\n}\n',
    "lib/testdata/case.json": "{}\n",
    "app/app.go": 'package app\n\nimport "example.com/m/lib"\n\nfunc Sum() int { return lib.Add(1, 2) }\n',
    "app/app_test.go": 'package app_test\n\nimport (\n\t"testing"\n\n\t"example.com/m/app"\n)\n\n'
                       'func TestSum(t *testing.T) {\n\tif app.Sum() != 3 {\n\t\tt.Fatal("sum")\n\t}\n}\n',
    "other/other_test.go": 'package other\n\nimport "testing"\n\nfunc TestOther(t *testing.T) {}\n',
    "README.md": "a module\n",
}
GO = ["go", "test", "-count=1", "-v", "./...", "-args", "-test.short"]


@pytest.mark.skipif(not HAS_GO, reason="go is not installed")
async def test_go_a_library_change_selects_its_package_and_its_importers_only(tmp_path):
    root = write(tmp_path / "mod", MODULE)
    profile = CheckProfile(commands=[GO], timeout_s=120)
    lib, ran = await chosen_and_run("go", GO, ["lib/lib.go"], root, profile)
    assert lib.argv == ["go", "test", "-count=1", "-v", "example.com/m/app", "example.com/m/lib", "-args", "-test.short"]
    assert not lib.whole and lib.note.startswith("go: 2 of 3 packages affected (go list -deps -test; 1 changed files)")
    # the chosen command ran those packages' tests, and not the other one's
    assert "ok  \texample.com/m/lib" in ran and "ok  \texample.com/m/app" in ran and "--- PASS: TestSum" in ran
    assert "example.com/m/other" not in ran
    # the importer (nothing imports it): only its own package
    app = await choose("go", GO, ["app/app_test.go"], root, profile)
    assert app.argv == ["go", "test", "-count=1", "-v", "example.com/m/app", "-args", "-test.short"], app
    # a test's data file: the package above it, with its importers
    data = await choose("go", GO, ["lib/testdata/case.json"], root, profile)
    assert data.argv == lib.argv
    # a file no package holds: nothing to run, said
    readme = await choose("go", GO, ["README.md"], root, profile)
    assert readme.argv is None and not readme.whole
    assert readme.note == "go: no package of 3 depends on a changed one (1 changed files, 1 of them in no package listed)"


@pytest.mark.skipif(not HAS_GO, reason="go is not installed")
async def test_go_runs_whole_when_go_list_fails_or_the_module_changes(tmp_path):
    root = write(tmp_path / "mod", MODULE)
    profile = CheckProfile(commands=[GO], timeout_s=120)
    module = await choose("go", GO, ["go.sum", "lib/lib.go"], root, profile)
    assert module == Chosen(GO, "go: the whole command runs: go.sum changes how every package builds", whole=True)
    # the command's own packages only, and its build tags given to go list
    narrow = ["go", "test", "-tags", "x", "./app"]
    inside = await choose("go", narrow, ["lib/lib.go"], root, profile)
    assert inside.argv == ["go", "test", "-tags", "x", "example.com/m/app"], inside
    # a package that does not parse: go list fails, the command runs whole and says why
    (root / "lib" / "lib.go").write_text("package lib\n\nimport (\n")
    broken = await choose("go", GO, ["lib/lib.go"], root, profile)
    assert broken.whole and broken.argv == GO
    assert broken.note.startswith("go: the whole command runs: `go list ...` exited 1"), broken.note


# --- refusals, before any tool runs --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["-rf", "--output_base=/", "/etc/passwd", "../outside", "a/../../b", "a\nb",
                                  "a\x00b", "", "."])
async def test_a_changed_path_that_is_no_safe_datum_runs_the_command_whole(tmp_path, path):
    root = write(tmp_path / "repo", {"BUILD": "", "a.py": ""})
    profile = fake(tmp_path, "bazel", "exit 0\n")
    argv = ["bazel", "test", "//..."]
    chosen = await choose("bazel", argv, ["a.py", path], root, profile)
    assert chosen.whole and chosen.argv == argv
    assert chosen.note == f"bazel: the whole command runs: the changed path {path!r} is no path inside the tree"
    assert calls(root) == []  # no tool was given it


async def test_an_unknown_selector_or_no_change(tmp_path):
    root = write(tmp_path / "repo", {"a.py": ""})
    profile = CheckProfile(commands=[["true"]])
    unknown = await choose("make", ["make", "test"], ["a.py"], root, profile)
    assert unknown == Chosen(["make", "test"], "make: the whole command runs: reposwarm has no selector 'make'", True)
    assert await choose("go", ["go", "test", "./..."], [], root, profile) == Chosen(None, "go: no file changed")


# --- bazel ---------------------------------------------------------------------------------------------------------

WORKSPACE = {"MODULE.bazel": "", "svc/api/BUILD": "", "svc/api/handler.py": "", "svc/api/sub/x.py": "",
             "libs/common/BUILD.bazel": "", "libs/common/util-1.py": "", "docs/guide.md": ""}
QUERY = ("printf 'Loading: 3 packages loaded\\n'\n"
         "case \" $* \" in *' query '*) printf 'py_test rule //svc/api:api_test\\npy_test rule //libs/common:common_test"
         "\\n';; esac\n")


def test_bazel_reads_its_flags_and_patterns_and_names_changed_files_by_their_packages(tmp_path):
    flags, patterns = toolselect._bazel_args(["--config", "ci", "-k", "//svc/...", "--test_output=errors", "libs/...",
                                              "--", "-//svc/legacy/..."])
    assert flags == ["--config", "ci", "-k", "--test_output=errors"]
    assert patterns == ["//svc/...", "libs/...", "-//svc/legacy/..."]
    root = write(tmp_path / "ws", WORKSPACE)
    terms, loose = toolselect._bazel_seeds(root, ["docs/guide.md", "libs/common/gone.py", "svc/api/handler.py",
                                                  "svc/api/sub/x.py"])
    assert loose == 1  # docs/ is in no package: in no target
    assert terms == ['"//libs/common:*"',  # a file gone: whichever target of its package named it
                     'filter("^(@@?)?//svc/api:(handler\\.py|sub/x\\.py)$", "//svc/api:*")']
    # a BUILD file: its package and the one above it; Bazel's own configuration, or a BUILD file gone: whole
    assert toolselect._bazel_seeds(root, ["libs/common/BUILD.bazel"]) == (['"//libs/common:*"'], 0)
    for path, why in (("MODULE.bazel", "Bazel's own configuration"), ("tools/defs.bzl", "Bazel's own"),
                      ("svc/BUILD", "is gone"), ("svc/api/a b.py", "does not name")):
        with pytest.raises(toolselect._Whole, match=why):
            toolselect._bazel_seeds(root, [path])


async def test_bazel_queries_the_rdeps_and_tests_only_those_labels(tmp_path):
    root = write(tmp_path / "ws", WORKSPACE)
    profile = fake(tmp_path, "bazel", QUERY)
    argv = ["bazel", "--output_base=/tmp/ob", "test", "--config", "ci", "//...", "--", "-//svc/legacy/..."]
    chosen, _ = await chosen_and_run("bazel", argv, ["libs/common/util-1.py", "docs/guide.md"], root, profile)
    labels = ["//libs/common:common_test", "//svc/api:api_test"]
    assert chosen.argv == ["bazel", "--output_base=/tmp/ob", "test", "--config", "ci", "--", *labels], chosen
    assert chosen.note.startswith("bazel: 2 test targets affected (rdeps of 2 changed files, 1 of them in no package)")
    universe = '"//..." except ("//svc/legacy/...")'
    query = (f'kind(".*_test rule", rdeps({universe}, filter("^(@@?)?//libs/common:(util\\-1\\.py)$", '
             f'"//libs/common:*"))) except attr("tags", "[\\[ ]manual[,\\]]", {universe})')
    assert calls(root) == [["--output_base=/tmp/ob", "query", "--output=label_kind", query],
                           ["--output_base=/tmp/ob", "test", "--config", "ci", "--", *labels]]


async def test_bazel_with_nothing_affected_or_a_failing_query(tmp_path):
    root = write(tmp_path / "ws", WORKSPACE)
    argv = ["bazel", "test", "//..."]
    none = await choose("bazel", argv, ["svc/api/handler.py"], root, fake(tmp_path, "bazel", "echo 'INFO: Empty'\n"))
    assert none == Chosen(None, "bazel: no test target affected (rdeps of 1 changed files)")
    failing = fake(tmp_path, "bazel", "echo \"ERROR: no such package 'svc/api'\"; exit 7\n")
    broken = await choose("bazel", argv, ["svc/api/handler.py"], root, failing)
    assert broken == Chosen(argv, "bazel: the whole command runs: `bazel query ...` exited 7: ERROR: no such "
                                  "package 'svc/api'", whole=True)
    # not installed (the sandbox's PATH has no bazel): whole, said
    missing = await choose("bazel", argv, ["svc/api/handler.py"], root, CheckProfile(commands=[["true"]]))
    assert missing.whole and missing.argv == argv and "`bazel query ...` exited" in missing.note
    build = await choose("bazel", ["bazel", "build", "//..."], ["svc/api/handler.py"], root, failing)
    assert build.whole and "no `bazel test` command" in build.note


# --- nx ------------------------------------------------------------------------------------------------------------

NX = "echo '> NX   Daemon is not running'\n[ \"$1\" = show ] && echo '[\"api\",\"web\"]'\nexit 0\n"


def test_nx_reads_targets_projects_and_keeps_the_rest():
    assert toolselect._nx_args(["-t", "test", "lint", "--parallel", "3", "--projects=api,web", "--exclude", "e2e",
                                "--base=main", "--all", "--", "--ci"]) == (
        ["test", "lint"], "api,web", ["--exclude=e2e"], ["--parallel", "3", "--", "--ci"])


async def test_nx_asks_which_projects_are_affected_and_runs_them(tmp_path):
    root = write(tmp_path / "nx", {"nx.json": "{}", "libs/ui/button.ts": ""})
    profile = fake(tmp_path, "nx", NX)
    argv = ["nx", "run-many", "-t", "test", "--parallel=3"]
    chosen, _ = await chosen_and_run("nx", argv, ["libs/ui/button.ts", "nx.json"], root, profile)
    files = "--files=libs/ui/button.ts,nx.json"
    assert chosen.argv == ["nx", "affected", "--targets=test", files, "--parallel=3"], chosen
    assert chosen.note.startswith("nx: 2 projects affected (nx show projects --affected, 2 changed files)")
    assert calls(root) == [["show", "projects", "--affected", files, "--with-target=test", "--json"],
                           ["affected", "--targets=test", files, "--parallel=3"]]
    # the command's own projects: the affected ones among them, by name
    (root / "calls.log").unlink()
    own = await choose("nx", ["nx", "run-many", "-t", "test", "-p", "api,web,docs"], ["libs/ui/button.ts"], root,
                       profile)
    assert own.argv == ["nx", "run-many", "--targets=test", "--projects=api,web"], own
    assert calls(root)[0] == ["show", "projects", "--affected", "--files=libs/ui/button.ts", "--with-target=test",
                              "--projects=api,web,docs", "--json"]
    quiet = fake(tmp_path, "nx", "echo '[]'\n")
    single = await choose("nx", ["nx", "run", "api:test"], ["libs/ui/button.ts"], root, quiet)
    assert single == Chosen(None, "nx: no project affected (nx show projects --affected, 1 changed files)")
    comma = await choose("nx", argv, ["libs/ui/a,b.ts"], root, profile)
    assert comma.whole and "comma" in comma.note


# --- turbo ---------------------------------------------------------------------------------------------------------

def dry(*tasks: tuple[str, str]) -> str:
    summary = {"packages": sorted({p for p, _ in tasks}),
               "tasks": [{"taskId": f"{p}#{t}", "task": t, "package": p} for p, t in tasks]}
    return f"printf '%s\\n' ' WARNING  no caches are enabled' '{json.dumps(summary)}'\n"


async def test_turbo_asks_its_dry_run_which_packages_changed_and_filters_on_them(tmp_path):
    root = write(tmp_path / "turbo", {"turbo.json": "{}", "packages/ui/index.ts": ""})
    body = ('case "$*" in *"...["*--dry=json*) ' + dry(("web", "test"), ("ui", "test"), ("ui", "build"))[:-1] + ";;\n"
            '*--dry=json*) ' + dry(("web", "test"), ("docs", "test"))[:-1] + ";;\nesac\n")
    profile = fake(tmp_path, "turbo", body)
    argv = ["turbo", "run", "test", "--concurrency", "2", "--", "--ci"]
    chosen, _ = await chosen_and_run("turbo", argv, ["packages/ui/index.ts"], root, profile)
    changes = f"--filter=...[{SINCE}]"
    assert chosen.argv == ["turbo", "run", "test", "--concurrency", "2", changes, "--", "--ci"], chosen
    assert chosen.note.startswith("turbo: 2 packages affected (since 0123456789ab; turbo reads git for it)")
    assert calls(root) == [["run", "test", "--concurrency", "2", changes, "--dry=json"], chosen.argv[1:]]
    # filters of its own are a union: the affected packages among them are named
    own = await choose("turbo", ["turbo", "test", "--filter=./apps/*", "--filter", "docs"], ["a.ts"], root, profile)
    assert own.argv == ["turbo", "run", "test", "--filter=web"], own
    assert calls(root)[-1] == ["run", "test", "--filter=./apps/*", "--filter=docs", "--dry=json"]
    for argv, why in ((["turbo", "run", "test", "--affected"], "own notion of changes"),
                      (["turbo", "prune", "web"], "no `turbo run` command")):
        whole = await choose("turbo", argv, ["a.ts"], root, profile)
        assert whole.whole and why in whole.note
    unread = await choose("turbo", ["turbo", "run", "test"], ["a.ts"], root, fake(tmp_path, "turbo", "echo '{'\n"))
    assert unread == Chosen(["turbo", "run", "test"], "turbo: the whole command runs: turbo --dry=json printed no "
                                                       "JSON reposwarm can read", whole=True)


# --- pants ---------------------------------------------------------------------------------------------------------

PANTS = ("echo '12:00:01.10 [INFO] Initializing scheduler...'\n"
         "case \"$*\" in *' list') printf 'src/py/app:tests\\nsrc/py/lib/util.py:lib\\n';; esac\n")


async def test_pants_lists_what_changed_with_its_dependents_and_tests_those(tmp_path):
    root = write(tmp_path / "pants", {"pants.toml": "", "src/py/lib/util.py": ""})
    profile = fake(tmp_path, "pants", PANTS)
    argv = ["pants", "--level=warn", "test", "--force", "::", "--", "-k", "fast"]
    chosen, _ = await chosen_and_run("pants", argv, ["src/py/lib/util.py"], root, profile)
    changes = [f"--changed-since={SINCE}", "--changed-dependents=transitive"]
    assert chosen.argv == ["pants", "--level=warn", *changes, "test", "--force", "--", "-k", "fast"], chosen
    assert chosen.note.startswith("pants: 2 targets affected (changed since 0123456789ab and their dependents; pants "
                                  "reads git for it)")
    assert calls(root) == [["--level=warn", *changes, "list"], chosen.argv[1:]]
    for argv, why in ((["pants", "test", "src/py::"], "narrower than `::`"),
                      (["pants", "--changed-since=main", "test"], "selects by changes itself")):
        whole = await choose("pants", argv, ["src/py/lib/util.py"], root, profile)
        assert whole.whole and why in whole.note
    nothing = await choose("pants", ["pants", "test", "::"], ["x.py"], root, fake(tmp_path, "pants", "exit 0\n"))
    assert nothing.argv is None and nothing.note.startswith("pants: no target affected")
    hostile = await choose("pants", ["pants", "test", "::"], ["x.py"], root, fake(tmp_path, "pants", "echo -x\n"))
    assert hostile.whole and "listed '-x'" in hostile.note
    before = calls(root)
    ref = await choose("pants", ["pants", "test", "::"], ["x.py"], root, profile, since="--all")
    assert ref == Chosen(["pants", "test", "::"], "pants: the whole command runs: '--all' is no commit pants can be "
                                                  "given", whole=True)
    assert calls(root) == before  # (pants was not asked)
