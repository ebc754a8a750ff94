"""Python checks run the tree: its import roots come first on PYTHONPATH in the real sandbox, so a test imports the
tree's package, not a copy installed in the interpreter (plainly, or editable from the user's checkout), under
`--import-mode=importlib` too; a program after a prefix (`env X=1 /venv/bin/python`) is bound and, when missing,
named as itself; and detection chooses the interpreter the user keeps the project's dependencies in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from reposwarm.checks.runner import run_profile
from reposwarm.checks.sandbox import python as tree_python
from reposwarm.contracts import CheckProfile
from tests.helpers import make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # (this venv's pytest plugins cost 1.5 s at every start)
# This venv's site-packages (pytest), for the venvs the tests make: a .pth names it, after their own packages.
OUR_SITE = sysconfig.get_paths()["purelib"]

# A build backend of the standard library only (pip installs offline with it, no setuptools or wheel needed): a
# wheel of src/, or an editable one whose .pth names src/ as hatchling's, flit's, pdm's and uv's do.
TINY_BACKEND = '''
import base64, hashlib, os, zipfile
NAME, VERSION = "pkg", "1.0"
DIST = f"{NAME}-{VERSION}.dist-info"

def _wheel(directory, files):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(directory, name), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{path},sha256={digest},{len(data)}")
        z.writestr(f"{DIST}/RECORD", "\\n".join(records + [f"{DIST}/RECORD,,"]) + "\\n")
    return name

def _metadata():
    return {f"{DIST}/METADATA": f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n".encode(),
            f"{DIST}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = _metadata()
    for top, _, names in os.walk("src"):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(top, n)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, "src")] = f.read()
    return _wheel(wheel_directory, files)

def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    files = _metadata()
    files[f"_{NAME}.pth"] = (os.path.abspath("src") + "\\n").encode()
    return _wheel(wheel_directory, files)
'''
PYPROJECT = """[build-system]
requires = []
build-backend = "tiny"
backend-path = ["_build"]

[project]
name = "pkg"
version = "1.0"
"""
# The test every tree runs: which `pkg` it imported, from where.
WHERE_TEST = """import pkg

def test_where():
    print("pkg from", pkg.__file__)
    assert pkg.WHERE == "tree", pkg.__file__
"""


def project(path: Path, where: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A src-layout project `pkg` whose package says `where` it is."""
    return {"pyproject.toml": PYPROJECT, "_build/tiny.py": TINY_BACKEND, "src/pkg/__init__.py": f"WHERE = {where!r}\n",
            "tests/test_where.py": WHERE_TEST, **(extra or {})}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def venv_with(tmp: Path, name: str, install: list[str], with_pytest: bool = True) -> Path:
    """A virtual environment with `pip install <install>` done in it, offline; this venv's pytest after its own."""
    venv = tmp / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    if with_pytest:
        (site / "zz_pytest_from_reposwarm.pth").write_text(OUR_SITE + "\n")
    if install:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                        "--no-build-isolation", "--no-deps", "--no-index", *install], check=True, capture_output=True)
    return venv


def pytest_of(venv: Path, *args: str) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


async def check(repo: Path, *commands: list[str], env: dict[str, str] | None = None):
    profile = CheckProfile(commands=list(commands), timeout_s=120, env={**QUICK, **(env or {})})
    return await run_profile(profile, repo, None, rerun=False)


def said(report) -> str:
    return "\n".join(c.output_tail for c in report.commands)


# --- an installed copy shadowing the tree ---


async def test_an_installed_copy_never_shadows_a_src_layout(tmp_path):
    installed = write(tmp_path / "release", project(tmp_path / "release", "installed"))
    venv = venv_with(tmp_path, "venv", [str(installed)])
    assert (next((venv / "lib").glob("python*/site-packages")) / "pkg" / "__init__.py").is_file()
    repo = make_repo(tmp_path / "repo", project(tmp_path / "repo", "tree"))
    report = await check(repo, pytest_of(venv), pytest_of(venv, "--import-mode=importlib"))
    assert [c.exit_code for c in report.commands] == [0, 0], said(report)
    assert report.tests_run == 2 and report.passed
    # (the same command run plainly, without the tree first, imports the installed copy: the fixture does shadow)
    plain = subprocess.run([*pytest_of(venv, "--import-mode=importlib", "-s")], cwd=repo, capture_output=True,
                           text=True, env={**os.environ, **QUICK, "PYTHONPATH": ""})
    assert plain.returncode == 1 and f"pkg from {venv}" in plain.stdout, plain.stdout


async def test_a_src_layout_with_the_machines_python_imports_the_tree(tmp_path):
    # no venv at all: the worker's own interpreter, as a profile of `python -m pytest` has it
    repo = make_repo(tmp_path / "repo", project(tmp_path / "repo", "tree"))
    report = await check(repo, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                                "--import-mode=importlib"])
    assert report.passed, said(report)
    assert f"pkg from {repo / 'src' / 'pkg' / '__init__.py'}" in said(report)


# --- the import roots, from the tree's own files ---


def roots(tmp: Path, files: dict[str, str]) -> list[str]:
    root = write(tmp / "t", files)
    return [os.path.relpath(p, root) for p in tree_python.import_roots(root)]


def test_import_roots_come_from_what_the_project_declares(tmp_path):
    pkg = {"lib/py/pkg/__init__.py": "", "src/other/__init__.py": ""}
    assert roots(tmp_path / "a", {"pyproject.toml": '[tool.setuptools]\npackage-dir = {"" = "lib/py"}\n', **pkg}) \
        == ["lib/py", "src"]
    assert roots(tmp_path / "b", {"pyproject.toml": '[tool.setuptools.packages.find]\nwhere = ["lib/py"]\n', **pkg}) \
        == ["lib/py", "src"]
    assert roots(tmp_path / "c", {"pyproject.toml": '[tool.hatch.build.targets.wheel]\npackages = ["lib/py/pkg"]\n',
                                  "lib/py/pkg/__init__.py": ""}) == ["lib/py"]
    assert roots(tmp_path / "d", {"pyproject.toml": '[tool.hatch.build.targets.wheel.sources]\n"lib/py" = ""\n',
                                  "lib/py/pkg/__init__.py": ""}) == ["lib/py"]
    assert roots(tmp_path / "e", {"pyproject.toml": '[tool.poetry]\npackages = [{include = "pkg", from = "lib/py"}]\n',
                                  "lib/py/pkg/__init__.py": ""}) == ["lib/py"]
    assert roots(tmp_path / "f", {"pyproject.toml": '[tool.pdm.build]\npackage-dir = "lib/py"\n',
                                  "lib/py/pkg/__init__.py": ""}) == ["lib/py"]
    assert roots(tmp_path / "g", {"setup.cfg": "[options]\npackage_dir =\n    = lib/py\n", "lib/py/pkg/__init__.py": ""}) \
        == ["lib/py"]
    assert roots(tmp_path / "h", {"setup.py": 'setup(package_dir={"": "lib/py"})\n', "lib/py/pkg/__init__.py": ""}) \
        == ["lib/py"]
    # a flat layout: the root; a src layout: src/ alone
    assert roots(tmp_path / "i", {"pyproject.toml": "", "pkg/__init__.py": ""}) == ["."]
    assert roots(tmp_path / "j", {"pyproject.toml": "", "src/pkg/__init__.py": "", "tests/test_x.py": ""}) == ["src"]
    # not a Python project: nothing
    assert roots(tmp_path / "k", {"package.json": "{}", "web/a.js": ""}) == []


def test_pytests_pythonpath_is_read_from_the_file_pytest_reads(tmp_path):
    files = {"src/pkg/__init__.py": "", "helpers/h.py": "", "other/o.py": ""}
    assert roots(tmp_path / "a", {"pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["helpers"]\n', **files}) \
        == ["src", "helpers"]
    assert roots(tmp_path / "b", {"pyproject.toml": '[tool.pytest]\npythonpath = ["helpers", "other"]\n', **files}) \
        == ["src", "helpers", "other"]
    assert roots(tmp_path / "c", {"setup.cfg": "[tool:pytest]\npythonpath = helpers\n", **files}) == ["src", "helpers"]
    assert roots(tmp_path / "d", {"tox.ini": "[pytest]\npythonpath = other\n", "setup.py": "", **files}) \
        == ["src", "other"]
    # pytest.ini wins over pyproject.toml, as in pytest
    assert roots(tmp_path / "e", {"pytest.ini": "[pytest]\npythonpath = other\n",
                                  "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["helpers"]\n', **files}) \
        == ["src", "other"]


def test_roots_leading_out_of_the_tree_are_ignored(tmp_path):
    outside = write(tmp_path / "outside", {"evil/__init__.py": ""})
    hostile = {"pyproject.toml": ('[tool.setuptools]\npackage-dir = {"" = "../outside"}\n'
                                  f'[tool.setuptools.packages.find]\nwhere = ["{outside}", "../../etc", "/etc"]\n'
                                  '[tool.pytest.ini_options]\npythonpath = ["..", "link", "~/x"]\n'),
               "setup.cfg": "[options]\npackage_dir =\n    = /usr/lib\n", "pkg/__init__.py": ""}
    root = write(tmp_path / "tree", hostile)
    (root / "link").symlink_to(outside, target_is_directory=True)
    assert tree_python.import_roots(root) == [root]  # only the flat layout's root is left
    broken = write(tmp_path / "broken", {"pyproject.toml": "[tool.setuptools\npackage-dir = 3", "setup.cfg": "[[[",
                                         "pkg/__init__.py": ""})
    assert tree_python.import_roots(broken) == [broken]


def test_pythonpath_puts_first_then_the_roots_then_the_profiles_entries(tmp_path):
    root = write(tmp_path / "tree", {"pyproject.toml": "", "src/pkg/__init__.py": ""})
    got = tree_python.pythonpath(root, {"PYTHONPATH": f"stubs:/opt/x:{root / 'src'}"}, first=["/tracer"])
    assert got.split(os.pathsep) == ["/tracer", str(root / "src"), str(root / "stubs"), "/opt/x"]
    # composing again with the result: each entry once
    assert tree_python.pythonpath(root, {"PYTHONPATH": got}, first=["/tracer"]) == got
    assert tree_python.pythonpath(write(tmp_path / "js", {"package.json": "{}"}), {}) == ""


# --- an editable install of the user's checkout ---

GONE_TEST = """import importlib
import pytest

def test_a_module_the_tree_removed_is_gone():
    with pytest.raises(ImportError):
        importlib.import_module("pkg.gone")
"""


def setuptools_finder(venv: Path, checkout: Path) -> None:
    """What `pip install -e` of a setuptools project writes where its layout is not a plain src/ (strict mode, or
    a package folder mapped elsewhere): a finder appended to sys.meta_path, from setuptools' own template."""
    from setuptools.command.editable_wheel import _finder_template

    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "__editable___pkg_1_0_finder.py").write_text(
        _finder_template("pkg-1.0", {"pkg": str(checkout / "src" / "pkg")}, {}))
    (site / "__editable__.pkg-1.0.pth").write_text(
        "import __editable___pkg_1_0_finder; __editable___pkg_1_0_finder.install()\n")


@pytest.mark.parametrize("visible", [False, True], ids=["checkout-hidden", "checkout-visible"])
async def test_an_editable_install_of_the_users_checkout_never_reaches_a_check(tmp_path, visible):
    # the user's checkout, installed editable the usual ways: a .pth naming its src/ (pip install -e with hatchling,
    # flit, pdm, uv...), and setuptools' finder; the tree checked is another commit, without pkg/gone.py
    checkout = make_repo(tmp_path / "checkout", project(tmp_path, "checkout", {"src/pkg/gone.py": "X = 1\n"}))
    with_pth = venv_with(tmp_path, "venv-pth", ["-e", str(checkout)])
    assert str(checkout / "src") in next((with_pth / "lib").glob("python*/site-packages/_pkg.pth")).read_text()
    with_finder = venv_with(tmp_path, "venv-finder", [])
    setuptools_finder(with_finder, checkout)
    tree = make_repo(tmp_path / "tree", project(tmp_path, "tree", {"tests/test_gone.py": GONE_TEST}))
    # (the worst case: the checkout visible in the sandbox, as one under /opt or named in read_only_paths would be)
    profile = CheckProfile(commands=[pytest_of(with_pth, "--import-mode=importlib"), pytest_of(with_finder)],
                           timeout_s=120, env=QUICK, read_only_paths=[str(checkout)] if visible else [])
    report = await run_profile(profile, tree, None, rerun=False)
    assert [c.exit_code for c in report.commands] == [0, 0], said(report)
    assert [c.tests_run for c in report.commands] == [2, 2]
    # the fixture's editable installs do reach the checkout outside the sandbox, without the tree's roots
    for venv in (with_pth, with_finder):
        plain = subprocess.run([str(venv / "bin" / "python"), "-c", "import pkg, pkg.gone; print(pkg.WHERE)"],
                               cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
        assert plain.stdout.strip() == "checkout", plain.stderr


# --- a flat layout, and pytest's pythonpath ---


async def test_a_flat_layout_and_pytests_pythonpath_import_the_tree(tmp_path):
    installed = write(tmp_path / "release", project(tmp_path / "release", "installed"))
    venv = venv_with(tmp_path, "venv", [str(installed)])
    flat = make_repo(tmp_path / "flat", {"pyproject.toml": "[project]\nname = 'pkg'\n", "pkg/__init__.py": "WHERE = 'tree'\n",
                                         "tests/test_where.py": WHERE_TEST})
    # pytest's pythonpath naming a folder of helpers the tests import by their top-level name
    helped = make_repo(tmp_path / "helped", project(tmp_path, "tree", {
        "pyproject.toml": PYPROJECT + '\n[tool.pytest.ini_options]\npythonpath = ["testing"]\n',
        "testing/helper.py": "HELPED = True\n",
        "tests/test_helped.py": "import helper\n\ndef test_helped():\n    assert helper.HELPED\n"}))
    # (a console script: pytest's own entry point puts no folder of the tree on sys.path)
    pytest_script = venv / "bin" / "pytest"
    pytest_script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys, pytest\nsys.exit(pytest.console_main())\n")
    pytest_script.chmod(0o755)
    for repo, tests in ((flat, 1), (helped, 2)):
        report = await check(repo, [str(pytest_script), "-q", "-p", "no:cacheprovider", "--import-mode=importlib"])
        assert report.passed and report.tests_run == tests, said(report)


# --- a program after a prefix ---


async def test_a_program_after_a_prefix_is_bound_and_a_missing_one_is_named_as_itself(tmp_path, monkeypatch):
    venv = venv_with(tmp_path, "venv", [])  # in /tmp, on no PATH: the sandbox shows it only where it is bound
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    repo = make_repo(tmp_path / "repo", project(tmp_path, "tree"))
    python = str(venv / "bin" / "python")
    report = await check(repo, ["env", "PYTHONPATH=src", python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         ["timeout", "-s", "KILL", "60", python, "-c", "import sys; print('in', sys.prefix)"],
                         ["nice", "-n", "5", "env", "X=1", python, "-c", "print('niced')"],
                         ["env", "X=1", "/nonexistent/python", "-m", "pytest"])
    first, timed, niced, missing = report.commands
    assert first.exit_code == 0 and first.tests_run == 1 and first.runner == "pytest", first.output_tail
    assert timed.exit_code == 0 and f"in {venv}" in timed.output_tail
    assert niced.exit_code == 0 and "niced" in niced.output_tail
    assert missing.exit_code == 127 and missing.reason == "command not found: /nonexistent/python"


def test_the_checks_command_names_the_missing_program_not_its_prefix(tmp_path):
    from tests.test_checks_command import checks

    repo = make_repo(tmp_path / "repo", {"README": "x\n"})
    done = checks(tmp_path, repo, {"commands": [["env", "X=1", "/nonexistent/python", "-m", "pytest"]]})
    assert done.returncode == 1
    assert "fix: `/nonexistent/python` was not found in the sandbox" in done.stdout, done.stdout
    assert "`env` was not found" not in done.stdout


# --- the interpreter, found where the project's environment is ---


@pytest.fixture
def bare_machine(tmp_path, monkeypatch) -> Path:
    """No active virtual environment, and a PATH whose python3 (a folder the test fills) has no pytest."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    plain = venv_with(tmp_path, "plain", [], with_pytest=False)
    (bin_dir / "python3").symlink_to(plain / "bin" / "python")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def find(checkout: Path | None, files: dict[str, str]):
    from reposwarm.intel import python_env

    return python_env.find(checkout, list(files), files.get)


async def test_the_checkouts_venv_with_an_editable_install_is_chosen_and_the_check_runs_the_tree(tmp_path, bare_machine):
    # the most common set-up: `python -m venv .venv && pip install -e .` in the user's checkout
    files = project(tmp_path, "checkout", {".gitignore": ".venv/\n"})
    checkout = make_repo(tmp_path / "checkout", files)
    venv = venv_with(checkout, ".venv", ["-e", str(checkout)])
    chosen = find(checkout, files)
    assert tuple(chosen) == (str(venv / "bin" / "python"), True)
    assert any(n.startswith(f"Python interpreter: {venv / 'bin' / 'python'}, the .venv of your checkout") and
               "pytest 9" in n for n in chosen.notes), chosen.notes
    # the detected profile, on a tree of another commit: the tree's package, not the checkout's
    from reposwarm.intel import structure

    profile, notes = structure.detect_profile(list(files), files.get, lambda: chosen)
    assert profile["commands"] == [[str(venv / "bin" / "python"), "-m", "pytest", "-q"]]
    tree = make_repo(tmp_path / "tree", project(tmp_path, "tree"))
    report = await run_profile(CheckProfile.model_validate({**profile, "env": QUICK}), tree, None, rerun=False)
    assert report.passed and report.tests_run == 1, said(report)


def test_a_venv_the_repository_commits_is_never_run(tmp_path, bare_machine):
    marker = tmp_path / "ran"
    files = {"setup.py": "", "tests/test_x.py": "", ".venv/pyvenv.cfg": "home = /usr/bin\n",
             ".venv/bin/python": f"#!/bin/sh\ntouch {marker}\necho '{{\"prefix\": \"/\", \"version\": \"3\", \"pytest\": \"9\"}}'\n"}
    checkout = make_repo(tmp_path / "hostile", files)
    (checkout / ".venv" / "bin" / "python").chmod(0o755)
    chosen = find(checkout, files)
    assert not marker.exists() and chosen[0] != str(checkout / ".venv" / "bin" / "python")


def test_the_active_venv_then_python3_then_reposwarms_own_and_each_choice_said(tmp_path, bare_machine, monkeypatch):
    files = {"pyproject.toml": "", "tests/test_x.py": ""}
    checkout = make_repo(tmp_path / "checkout", {**files, ".gitignore": "venv/\n"})
    without = venv_with(checkout, "venv", [], with_pytest=False)  # the checkout's, with no pytest: passed over
    active = venv_with(tmp_path, "active", [])
    monkeypatch.setenv("VIRTUAL_ENV", str(active))
    chosen = find(checkout, files)
    assert tuple(chosen) == (str(active / "bin" / "python"), True)
    assert f"Python: {without / 'bin' / 'python'} (the venv of your checkout (bound read-only into the checks, never " \
           "copied into a tree)) has no pytest: passed over" in chosen.notes
    assert any(f"the active virtual environment (VIRTUAL_ENV={active})" in n for n in chosen.notes)
    # reposwarm's own environment active: passed over; python3 on PATH with pytest is named as python3
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    with_pytest = venv_with(tmp_path, "system", [])
    (bare_machine / "python3").unlink()
    (bare_machine / "python3").symlink_to(with_pytest / "bin" / "python")
    assert tuple(find(checkout, files)) == ("python3", True)
    # nothing here with pytest but reposwarm's own: it, and said so
    (bare_machine / "python3").unlink()
    shutil.rmtree(without)
    chosen = find(checkout, files)
    assert tuple(chosen) == (sys.executable, True)
    assert any("reposwarm's own virtual environment, since no other interpreter here imports pytest" in n
               for n in chosen.notes), chosen.notes


def test_uv_and_poetry_environments_are_found_as_their_tools_say(tmp_path, bare_machine):
    # (stand-ins for the tools, answering as they do: uv is only looked for on PATH, poetry says where its env is)
    env = venv_with(tmp_path, "poetry-env", [])
    for name, script in (("uv", "exit 0"), ("poetry", f'[ "$*" = "env info -p" ] && echo {env}')):
        (bare_machine / name).write_text(f"#!/bin/sh\n{script}\n")
        (bare_machine / name).chmod(0o755)
    checkout = make_repo(tmp_path / "checkout", {"pyproject.toml": "", "tests/test_x.py": ""})
    uv = find(checkout, {"pyproject.toml": "", "uv.lock": 'name = "pytest"\n'})
    assert tuple(uv) == (".venv/bin/python", True) and uv.setup == (("uv", "sync", "--frozen", "--no-install-project"),)
    from reposwarm.intel import structure

    profile, _ = structure.detect_profile(["pyproject.toml", "uv.lock", "t/test_x.py"],
                                          {"uv.lock": 'name = "pytest"\n'}.get, lambda: uv)
    assert profile["setup"] == [["uv", "sync", "--frozen", "--no-install-project"]]
    poetry = find(checkout, {"pyproject.toml": "[tool.poetry]\nname = 'x'\n", "poetry.lock": ""})
    assert tuple(poetry) == (str(env / "bin" / "python"), True)
    assert any("poetry's environment for your checkout (`poetry env info -p`)" in n for n in poetry.notes)


def test_try_proposes_the_checkouts_venv(tmp_path, bare_machine, capsys):
    from reposwarm.cli.trying import propose_lanes

    checkout = make_repo(tmp_path / "checkout", project(tmp_path, "v1", {".gitignore": ".venv/\n"}))
    venv = venv_with(checkout, ".venv", [])
    parent = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    lanes = propose_lanes(checkout, parent, ["src/pkg/__init__.py"], tmp_path / "try")
    text = lanes.read_text()
    assert f"- - {venv / 'bin' / 'python'}\n" in text, text
    assert "the .venv of your checkout" in capsys.readouterr().out


# --- what the build writes into the package ---


async def test_a_version_file_the_build_writes_is_made_for_the_check_and_removed_after(tmp_path):
    # hatch-vcs and setuptools-scm write src/pkg/_version.py at install time, the project ignores it, and the
    # package imports it: a clean tree's package cannot be imported without it
    files = project(tmp_path, "tree", {
        "pyproject.toml": PYPROJECT + '\n[tool.hatch.build.hooks.vcs]\nversion-file = "src/pkg/_version.py"\n',
        ".gitignore": "src/*/_version.py\n",
        "src/pkg/__init__.py": "from ._version import __version__\nWHERE = 'tree'\n",
        "tests/test_version.py": "import pkg\n\ndef test_version():\n    assert pkg.__version__ == '2.3.0'\n"})
    repo = make_repo(tmp_path / "repo", files)
    subprocess.run(["git", "-C", str(repo), "tag", "v2.3.0"], check=True)
    report = await check(repo, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    assert report.passed and report.tests_run == 2, said(report)
    assert any("python: wrote src/pkg/_version.py (version 2.3.0)" in line for line in report.setup), report.setup
    assert not (repo / "src" / "pkg" / "_version.py").exists()
    # one git does not ignore is never written (a lane's checkpoint would commit it)
    (repo / ".gitignore").write_text("")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "track it"], check=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@h", "GIT_COMMITTER_NAME": "u",
                        "GIT_COMMITTER_EMAIL": "u@h"})
    assert tree_python.write_version_files(repo) == ([], [])


def test_the_checkouts_venv_named_by_the_profile_is_not_a_missing_dependency(tmp_path):
    from reposwarm.cli.checks import missing_dependencies

    checkout = make_repo(tmp_path / "checkout", {".gitignore": ".venv/\nnode_modules/\n", "setup.py": ""})
    venv = venv_with(checkout, ".venv", [], with_pytest=False)
    (checkout / "node_modules").mkdir()
    named = CheckProfile(commands=[["env", "X=1", str(venv / "bin" / "python"), "-m", "pytest"]])
    assert missing_dependencies(checkout, named) == ["node_modules"]
    relative = CheckProfile(commands=[[".venv/bin/python", "-m", "pytest"]])
    assert sorted(missing_dependencies(checkout, relative)) == [".venv", "node_modules"]


def test_a_monorepos_nested_projects_add_their_package_folders_not_their_fixtures(tmp_path):
    files = {"pyproject.toml": "", "tools/t.py": "",
             "services/api/pyproject.toml": "", "services/api/src/api/__init__.py": "",
             "services/web/setup.cfg": "[options]\npackage_dir =\n    = lib\n", "services/web/lib/web/__init__.py": "",
             "services/flat/pyproject.toml": "", "services/flat/flat/__init__.py": "",  # (its folder: not added)
             "services/evil/pyproject.toml": '[tool.setuptools]\npackage-dir = {"" = "../../.."}\n',
             "tests/fixtures/proj/pyproject.toml": "", "tests/fixtures/proj/src/requests/__init__.py": ""}
    assert roots(tmp_path, files) == [".", "services/api/src", "services/web/lib"]
