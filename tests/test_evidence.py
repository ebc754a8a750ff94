"""What a check's processes loaded (reposwarm/checks/evidence/), through the real sandbox (run_profile) and real
runtimes: an installed copy of a changed module is named with where it came from, and is loaded once the tree comes
first; a changed file no test loads is not loaded; a command that gave no evidence leaves its files unknown; a
node test importing a stale ignored `dist/` ran a build older than the changed source; a node test importing the
source loaded it, with the changed lines that ran; `go test` built the package it tested and what it imports, not a
package with no test files; cargo ran a crate's tests; the tracer chains to another sitecustomize and records
processes that end through os._exit and pytest-xdist's workers; the evidence switch; the changed lines of a diff."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from activities.validate import _watched
from reposwarm.checks import evidence, runner
from reposwarm.contracts import CheckProfile, CommandResult, Loaded, TestReport, ValidateInput
from reposwarm.runs.store import Store
from tests.helpers import HAS_CARGO, ROOT, cargo_on_path, git, make_repo, write_yaml

PY = sys.executable  # reposwarm's venv: pytest and pytest-xdist
SYSTEM_PY = "/usr/bin/python3"
HAS_GO = shutil.which("go") is not None


def _can_install() -> bool:
    """A Python that makes a venv and builds a wheel offline (setuptools and wheel installed)."""
    if not os.path.exists(SYSTEM_PY):
        return False
    done = subprocess.run([SYSTEM_PY, "-c", "import venv, setuptools, wheel"], capture_output=True)
    return done.returncode == 0


async def _check(tree: Path, argv: list[str], watched: tuple[str, ...] = (), lines: dict | None = None,
                 env: dict[str, str] | None = None, store: Store | None = None) -> TestReport:
    profile = CheckProfile(commands=[argv], timeout_s=240, env=env or {})
    return await runner.run_profile(profile, tree, store, rerun=False,
                                    watched=evidence.Watched(watched, lines or {}))


# --- Python: an installed copy of a changed module ---

TINY = {
    "packages/tiny/pyproject.toml": '[project]\nname = "tiny"\nversion = "1.0"\n[tool.setuptools]\npackages = ["tiny"]\n',
    "packages/tiny/tiny/__init__.py": "",
    "packages/tiny/tiny/mod.py": "def g():\n    return 1\n",
    "packages/tiny/tiny/unused.py": "def never():\n    return 0\n",
    "packages/tiny/tests/test_g.py": ("import unittest\nfrom tiny.mod import g\n\n\nclass T(unittest.TestCase):\n"
                                      "    def test_g(self):\n        self.assertEqual(g(), 1)\n"),
}


INSTALLABLE = pytest.mark.skipif(not _can_install(),
                                 reason=f"{SYSTEM_PY} cannot build a wheel offline (setuptools, wheel)")


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with `tiny` installed from a copy of TINY, not editable: the copy a user's environment holds."""
    source = make_repo(tmp_path_factory.mktemp("tiny-source"), TINY)
    venv = tmp_path_factory.mktemp("tiny") / "venv"
    subprocess.run([SYSTEM_PY, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                    str(source / "packages/tiny")], check=True, capture_output=True)
    return venv


@INSTALLABLE
async def test_an_installed_copy_of_a_changed_module_is_named_then_loaded_once_the_tree_is_first(tmp_path, tiny_venv):
    # A monorepo's Python project in packages/tiny, installed (not editable) in the venv the check runs; the tree's
    # copy then changes (the lane's change), and the tests import `tiny` from the venv.
    tree = make_repo(tmp_path / "repo", TINY)
    venv = tiny_venv
    (tree / "packages/tiny/tiny/mod.py").write_text("def g():\n    return 1  # the change\n")
    (tree / "packages/tiny/tiny/unused.py").write_text("def never():\n    return 2\n")
    argv = [str(venv / "bin/python"), "-m", "unittest", "discover", "-s", "packages/tiny/tests"]
    changed = ("packages/tiny/tiny/mod.py", "packages/tiny/tiny/unused.py", "packages/tiny/README.md")

    report = await _check(tree, argv, changed)

    assert report.commands[0].exit_code == 0, report.commands[0].output_tail  # (the installed copy passes)
    loaded = report.commands[0].loaded
    assert loaded is not None and loaded.languages == ["python"]
    installed = str(venv / "lib")
    assert report.exercise is not None
    where = report.exercise.outside["packages/tiny/tiny/mod.py"]
    assert where.startswith(installed) and where.endswith("site-packages/tiny/mod.py")
    assert report.exercise.loaded == [] and report.exercise.not_loaded == ["packages/tiny/tiny/unused.py"]
    assert "packages/tiny/README.md" not in report.exercise.unknown  # (docs are left out)
    assert report.exercise.shadowed["packages/tiny/tiny/__init__.py"].startswith(installed)  # (unchanged: a warning)

    # The tree first (the profile's PYTHONPATH): the tree's module is loaded, the unused one still is not.
    first = await _check(tree, argv, changed, env={"PYTHONPATH": "packages/tiny"})

    assert first.exercise is not None
    assert first.exercise.loaded == ["packages/tiny/tiny/mod.py"]
    assert first.exercise.outside == {} and first.exercise.not_loaded == ["packages/tiny/tiny/unused.py"]


@INSTALLABLE
def test_reposwarm_checks_on_head_says_which_tree_modules_were_loaded_from_outside(tmp_path, tiny_venv):
    repo = make_repo(tmp_path / "repo", TINY)
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"all": {"allowed_paths": ["**"]}}},
        "validation": {"profiles": {"default": {"commands": [[str(tiny_venv / "bin/python"), "-m", "unittest",
                                                                "discover", "-s", "packages/tiny/tests"]]}}}})
    done = subprocess.run([PY, str(ROOT / "starter.py"), "checks", "--repo", str(repo), "--lanes", str(lanes)],
                          capture_output=True, text=True, env={**os.environ, "REPOSWARM_HOME": str(tmp_path / "home")},
                          timeout=300)

    assert done.returncode == 0, done.stdout + done.stderr  # (green: the installed copy passes its tests)
    site = next((tiny_venv / "lib").glob("python3*/site-packages"))
    assert "fix: 2 file(s) of the tree were loaded from outside it" in done.stdout, done.stdout
    assert f"`packages/tiny/tiny/` (2 files) was loaded from {site}/tiny/" in done.stdout, done.stdout


async def test_a_command_that_gave_no_evidence_leaves_its_files_unknown_never_not_loaded(tmp_path):
    tree = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/a.py": "X = 1\n", "pytest.ini": "[pytest]\npythonpath = .\n",
                                          "tests/test_a.py": "from pkg.a import X\n\ndef test_x():\n    assert X == 1\n"})
    # -I: no PYTHONPATH, no sitecustomize: the interpreter gives no record (and pytest still runs the tree's test)
    report = await _check(tree, [PY, "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], ("pkg/a.py",))

    command = report.commands[0]
    assert command.exit_code == 0 and command.tests_run == 1, command.output_tail
    assert command.loaded is not None and command.loaded.languages == []
    assert "no interpreter of the command gave a record" in command.loaded.note
    assert report.exercise is not None
    assert report.exercise.unknown == ["pkg/a.py"] and report.exercise.not_loaded == []


async def test_pytest_xdist_workers_and_os_exit_children_are_recorded_and_the_store_holds_each_process(
        tmp_path, reposwarm_home):
    tree = make_repo(tmp_path / "repo", {
        "pkg/__init__.py": "",
        "pkg/in_worker.py": "VALUE = 2\n",
        "pkg/in_child.py": "VALUE = 3\n",
        "tests/test_w.py": (
            "import multiprocessing, os\n\n"
            "def test_worker():\n    from pkg.in_worker import VALUE\n    assert VALUE == 2\n\n"
            "def _child():\n    import pkg.in_child\n    os._exit(0)\n\n"
            "def test_forked_child():\n"
            "    p = multiprocessing.get_context('fork').Process(target=_child)\n"
            "    p.start(); p.join()\n    assert p.exitcode == 0\n"),
    })
    store = Store("evidence-test-xdist")
    report = await _check(tree, [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "tests"],
                          ("pkg/in_worker.py", "pkg/in_child.py"), store=store)

    command = report.commands[0]
    assert command.exit_code == 0, command.output_tail
    assert report.exercise is not None and report.exercise.loaded == ["pkg/in_child.py", "pkg/in_worker.py"]
    assert command.loaded is not None and command.loaded.ref is not None
    processes = store.get_json(command.loaded.ref)["python"]
    # the controller, two workers, and the forked child that ended through os._exit
    assert any(p["how"] == "_exit" and "pkg.in_child" in p["modules"] for p in processes)
    assert sum(1 for p in processes if "pkg.in_worker" in p["modules"]) == 1
    assert len(processes) >= 3


async def test_the_tracer_runs_the_sitecustomize_python_would_have_run(tmp_path):
    tree = make_repo(tmp_path / "repo", {
        "site/sitecustomize.py": "import os\nos.environ['THEIRS'] = 'ran'\n",
        "pkg/__init__.py": "",
        "run.py": "import os, pkg\nprint('theirs:', os.environ.get('THEIRS'))\n",
    })
    report = await _check(tree, [PY, "run.py"], ("pkg/__init__.py",), env={"PYTHONPATH": "site"})

    command = report.commands[0]
    assert command.exit_code == 0 and "theirs: ran" in command.output_tail, command.output_tail
    assert report.exercise is not None and report.exercise.loaded == ["pkg/__init__.py"]


async def test_python_3_12_measures_the_changed_lines_that_ran(tmp_path):
    # (a real interpreter, not pyenv's shim, which needs pyenv's own environment)
    found = [*sorted((Path.home() / ".pyenv/versions").glob("3.1[2-9]*/bin/python3")),
             *(Path(p) for p in ("/usr/bin/python3.12", "/usr/bin/python3.13") if os.path.exists(p))]
    py312 = found[0] if found else None
    if py312 is None:
        pytest.skip("no Python 3.12+ here")
    tree = make_repo(tmp_path / "repo", {"pkg/__init__.py": "",
                                          "pkg/m.py": "def ran():\n    x = 1\n    return x\n\n\ndef idle():\n    return 2\n",
                                          "main.py": "from pkg.m import ran\nran()\n"})
    report = await _check(tree, [str(py312), "main.py"], ("pkg/m.py",), {"pkg/m.py": (2, 3, 7)})

    assert report.exercise is not None and report.exercise.loaded == ["pkg/m.py"], report.commands[0].loaded
    assert report.exercise.diff_lines == {"pkg/m.py": (2, 3)}


# --- node ---

ADD = "function add(a, b) {\n  return a + b;\n}\nfunction sub(a, b) {\n  return a - b;\n}\nmodule.exports = { add, sub };\n"
NODE_TEST = ("const { test } = require('node:test');\nconst assert = require('node:assert');\n"
             "const { add } = require('../{where}/index.js');\ntest('adds', () => { assert.equal(add(1, 2), 3); });\n")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_node_test_importing_a_stale_dist_ran_a_build_not_made_from_this_tree(tmp_path):
    tree = make_repo(tmp_path / "repo", {"package.json": '{"name": "n", "version": "1.0.0"}\n', ".gitignore": "dist/\n",
                                          "src/index.js": ADD, "test/a.test.js": NODE_TEST.replace("{where}", "dist")})
    # the build a cached setup step left: ignored by git, made before the change to src/index.js
    (tree / "dist").mkdir()
    (tree / "dist/index.js").write_text(ADD)
    os.utime(tree / "dist/index.js", (time.time() - 3600, time.time() - 3600))
    (tree / "src/index.js").write_text(ADD.replace("a + b", "b + a"))

    report = await _check(tree, ["node", "--test", "test/a.test.js"], ("src/index.js",))

    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    assert report.exercise is not None
    assert report.exercise.outside == {
        "src/index.js": "dist/index.js (a build older than src/index.js: not made from this tree)"}
    assert report.exercise.loaded == [] and report.exercise.not_loaded == []

    # the same build made after the change (as a check's own build step makes it): the change ran, as that build
    os.utime(tree / "dist/index.js", None)
    fresh = await _check(tree, ["node", "--test", "test/a.test.js"], ("src/index.js",))
    assert fresh.exercise is not None and fresh.exercise.loaded == ["src/index.js"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_node_test_that_loads_the_changed_source_loaded_it_with_the_changed_lines_that_ran(tmp_path):
    tree = make_repo(tmp_path / "repo", {"package.json": '{"name": "n", "version": "1.0.0"}\n', "src/index.js": ADD,
                                          "src/other.js": "module.exports = 1;\n",
                                          "test/b.test.js": NODE_TEST.replace("{where}", "src")})
    report = await _check(tree, ["node", "--test", "test/b.test.js"], ("src/index.js", "src/other.js"),
                          {"src/index.js": (2, 5)})

    assert report.commands[0].loaded is not None and report.commands[0].loaded.languages == ["node"]
    assert report.exercise is not None
    assert report.exercise.loaded == ["src/index.js"] and report.exercise.not_loaded == ["src/other.js"]
    assert report.exercise.diff_lines == {"src/index.js": (1, 2)}  # add's body ran, sub's did not


NODE_MODULES = (Path(__file__).parent / "fixtures" / "node" / "node_modules").resolve()


@pytest.mark.skipif(not (NODE_MODULES / "vitest").is_dir() or shutil.which("node") is None,
                    reason="tests/fixtures/node/node_modules is missing (make toolchains installs vitest)")
async def test_vitest_s_forked_workers_give_their_coverage_though_they_end_by_sigterm(tmp_path):
    tree = make_repo(tmp_path / "repo", {
        "package.json": '{"name": "v", "version": "1.0.0", "type": "module"}\n', ".gitignore": "node_modules\n",
        "src/sum.ts": "export function sum(a: number, b: number): number {\n  return a + b;\n}\n",
        "src/unused.ts": "export const unused = 1;\n",
        "test/sum.test.ts": "import { test, expect } from 'vitest'\nimport { sum } from '../src/sum'\n\n"
                            "test('adds', () => expect(sum(1, 2)).toBe(3))\n"})
    (tree / "node_modules").symlink_to(NODE_MODULES)
    profile = CheckProfile(commands=[["node", "node_modules/vitest/vitest.mjs", "run", "--pool=forks"]],
                           read_only_paths=[str(NODE_MODULES)], timeout_s=240)
    report = await runner.run_profile(profile, tree, None, rerun=False,
                                      watched=evidence.Watched(("src/sum.ts", "src/unused.ts")))

    command = report.commands[0]
    assert command.exit_code == 0 and command.runner == "vitest", command.output_tail
    assert command.loaded is not None and command.loaded.languages == ["node"], command.loaded
    assert report.exercise is not None
    assert report.exercise.loaded == ["src/sum.ts"] and report.exercise.not_loaded == ["src/unused.ts"]


# --- Go, Rust ---


@pytest.mark.skipif(not HAS_GO, reason="go is not installed")
async def test_go_test_built_the_tested_package_and_its_imports_not_a_package_with_no_test_files(tmp_path):
    tree = make_repo(tmp_path / "repo", {
        "go.mod": "module example.com/g\n\ngo 1.19\n",
        "a/a.go": 'package a\n\nimport "example.com/g/b"\n\nfunc A() int { return b.B() + 1 }\n',
        "a/a_test.go": 'package a\n\nimport "testing"\n\nfunc TestA(t *testing.T) {\n\tif A() != 3 {\n\t\tt.Fatal("no")\n\t}\n}\n',
        "b/b.go": "package b\n\nfunc B() int { return 2 }\n",
        "c/c.go": "package c\n\nfunc C() int { return 3 }\n",
    })
    report = await _check(tree, ["go", "test", "./..."], ("a/a.go", "b/b.go", "c/c.go"))

    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    assert report.exercise is not None
    assert report.exercise.loaded == ["a/a.go", "b/b.go"]  # b: no tests of its own, built into a's
    assert report.exercise.not_loaded == ["c/c.go"]  # no test files, imported by no tested package


@pytest.mark.skipif(not HAS_CARGO, reason="cargo is not installed")
async def test_cargo_ran_the_crates_tests(tmp_path, monkeypatch):
    cargo_on_path(monkeypatch)
    tree = make_repo(tmp_path / "repo", {
        "Cargo.toml": '[package]\nname = "tiny-crate"\nversion = "0.1.0"\nedition = "2021"\n',
        "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n"
                      "    fn adds() { assert_eq!(super::add(1, 2), 3); }\n}\n",
    })
    report = await _check(tree, ["cargo", "test"], ("src/lib.rs",))

    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    assert report.exercise is not None and report.exercise.loaded == ["src/lib.rs"]


# --- the switch, the rules, the change's lines ---


async def test_evidence_off_takes_none(tmp_path, monkeypatch):
    monkeypatch.setenv(evidence.SWITCH, "off")
    tree = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "main.py": "import pkg\n"})
    report = await _check(tree, [PY, "main.py"], ("pkg/__init__.py",))

    assert report.commands[0].exit_code == 0
    assert report.commands[0].loaded is None and report.exercise is None


def _result(argv: list[str], runner_name: str, loaded: Loaded | None, exit_code: int | None = 0) -> CommandResult:
    return CommandResult(argv=argv, exit_code=exit_code, duration_s=1.0, runner=runner_name, loaded=loaded)


def test_a_file_is_not_loaded_only_when_no_command_could_have_run_it_unseen():
    python = Loaded(languages=["python"], inside=["a.py"])
    files = ["a.py", "b.py", "c.ts", "d.rs", "e.java", "docs/x.md"]
    seen = evidence.exercise([_result(["pytest"], "pytest", python)], files)
    assert (seen.loaded, seen.not_loaded, seen.unknown) == (["a.py"], ["b.py"], ["c.ts", "d.rs", "e.java"])
    # a linter that runs no code hides nothing; `make test` with no evidence at all may have run b.py unseen
    lint = _result(["ruff", "check", "."], "", Loaded())
    assert evidence.exercise([_result(["pytest"], "pytest", python), lint], files).not_loaded == ["b.py"]
    make = _result(["make", "test"], "", Loaded())
    assert "b.py" in evidence.exercise([_result(["pytest"], "pytest", python), make], files).unknown
    # a command killed at a limit lost its processes' records
    killed = _result(["pytest"], "pytest", Loaded(languages=["python"]), exit_code=None)
    assert "b.py" in evidence.exercise([_result(["pytest"], "pytest", python), killed], files).unknown
    # outside anywhere stays outside
    other = _result(["pytest", "-k", "x"], "pytest", Loaded(languages=["python"], outside={"a.py": "/site/a.py"}))
    assert evidence.exercise([_result(["pytest"], "pytest", python), other], files).outside == {"a.py": "/site/a.py"}


def test_the_changed_lines_are_the_executable_lines_of_the_diff(tmp_path):
    tree = make_repo(tmp_path / "repo", {"m.py": "def f():\n    return 1\n", "a.js": "const a = 1;\n"})
    base = git(tree, "rev-parse", "HEAD")
    (tree / "m.py").write_text("def f():\n    # why\n    return 2\n\n\ndef g():\n    return 3\n")
    (tree / "a.js").write_text("const a = 2;\n// note\n\nconst b = 3;\n")
    git(tree, "commit", "-qam", "change")

    assert evidence.changed_lines(tree, base, ["m.py", "a.js"]) == {"m.py": (3, 6, 7), "a.js": (1, 4)}
    assert sorted(evidence.changed_files(tree, base) or []) == ["a.js", "m.py"]


async def test_validation_watches_the_change_against_the_base_in_every_part(tmp_path):
    tree = make_repo(tmp_path / "repo", {"pkg/a.py": "A = 1\n", "pkg/b.py": "B = 1\n", "README.md": "x\n"})
    base = git(tree, "rev-parse", "HEAD")
    (tree / "pkg/a.py").write_text("A = 2\n")
    (tree / "README.md").write_text("y\n")
    git(tree, "commit", "-qam", "change")
    req = ValidateInput(run_id="r", repo_path=str(tree), ref="HEAD", profile_name="default",
                        profile=CheckProfile(commands=[["true"]]), baseline=TestReport(passed=True, ref=base),
                        touched={})  # (a remainder part: no lane's files given)

    watched = await _watched(req, tree)

    assert watched.files == ("pkg/a.py",) and watched.lines == {"pkg/a.py": (1,)}


HOSTILE = """
import os, sys
import pkg
site = os.environ["PYTHONPATH"].split(os.pathsep)[0]
records = os.path.join(os.path.dirname(site), "evidence-python")
os.mkfifo(os.path.join(records, "fifo.json"))  # reading it would hang the worker
os.symlink("/etc/passwd", os.path.join(records, "link.json"))  # the worker's own file
with open(os.path.join(records, "deep.json"), "w") as f:
    f.write("[" * 200000 + "]" * 200000)  # a parser's recursion
with open(os.path.join(records, "shape.json"), "w") as f:
    f.write('{"modules": {"x": 1, "pkg.other": "/elsewhere/pkg/other.py"}, "lines": [1], "pid": "no"}')
print("planted")
"""


async def test_records_a_check_plants_are_read_as_data_never_followed_or_waited_on(tmp_path):
    tree = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/other.py": "", "main.py": HOSTILE})
    report = await _check(tree, [PY, "main.py"], ("pkg/__init__.py", "pkg/other.py"))

    command = report.commands[0]
    assert command.exit_code == 0 and "planted" in command.output_tail, command.output_tail
    assert report.exercise is not None
    assert report.exercise.loaded == ["pkg/__init__.py"]  # its own record, read
    # the planted record is data: a tree module it says came from elsewhere is said so (it proves a mistake, not
    # honesty: docs/checks.md), its malformed fields dropped
    assert report.exercise.outside == {"pkg/other.py": "/elsewhere/pkg/other.py"}


async def test_unsandboxed_checks_take_the_same_evidence_and_not_the_supervisor_s(tmp_path, monkeypatch,
                                                                                  reposwarm_home):
    monkeypatch.setenv("REPOSWARM_SANDBOX", "off")
    tree = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "main.py": "import pkg\n"})
    store = Store("evidence-test-unsandboxed")
    report = await _check(tree, [PY, "main.py"], ("pkg/__init__.py",), store=store)

    command = report.commands[0]
    assert command.exit_code == 0 and not command.sandboxed
    assert report.exercise is not None and report.exercise.loaded == ["pkg/__init__.py"]
    assert command.loaded is not None and command.loaded.ref is not None
    processes = store.get_json(command.loaded.ref)["python"]
    assert len(processes) == 1 and processes[0]["argv"][0].endswith("main.py")


def test_a_module_is_held_against_the_tree_file_it_names_in_src_layouts_packages_and_namespace_packages(tmp_path):
    from reposwarm.checks.evidence import python as tracer

    tree = make_repo(tmp_path / "repo", {
        "pyproject.toml": "[project]\nname = 'x'\n", "src/attr/__init__.py": "", "src/attr/_make.py": "",
        "src/ns/pkg/mod.py": "", "vendor/six.py": "", "tests/test_a.py": ""})
    root = str(evidence.tree_files(tree).root)
    files = evidence.tree_files(tree)
    record = tracer.Process(pid=1, argv=[], executable="", version="3.11", how="exit", path=[f"{root}/tests"],
                            modules={"attr": "/site/attr/__init__.py", "attr._make": f"{root}/src/attr/_make.py",
                                     "ns.pkg.mod": "/site/ns/pkg/mod.py", "six": "/site/six.py",
                                     "test_a": f"{root}/tests/test_a.py", "x.y": f"{root}/build/lib/x/y.py"},
                            lines={}, monitored=False)

    found = tracer.sort([record], files, set())

    assert found.inside == {"src/attr/_make.py", "tests/test_a.py"}
    assert found.outside == {"src/attr/__init__.py": "/site/attr/__init__.py",  # a package for a package
                             "src/ns/pkg/mod.py": "/site/ns/pkg/mod.py"}  # a namespace package's module
    # vendor/ is no import root (no project there, on no sys.path): an installed `six` is not the tree's
