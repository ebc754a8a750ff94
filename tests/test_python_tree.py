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


def venv_with(tmp: Path, name: str, install: list[str]) -> Path:
    """A virtual environment with `pip install <install>` done in it, offline; this venv's pytest after its own."""
    venv = tmp / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
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
