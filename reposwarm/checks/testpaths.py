"""Which paths of a repository are its tests, and which are the configuration that decides how they run.

The gate (activities/validate.py) runs the base commit's version of every such path a lane changed against the
merged code, and lists each change to test configuration by itself (issue 31): a lane asked to make tests pass
must not be able to pass them by changing the tests or how they run.

Known by name alone, per ecosystem: Python (`test_*.py`, `*_test.py`, anything under a `tests/` or `test/`
folder), JavaScript and TypeScript (`*.test.*`, `*.spec.*`, `__tests__/`), Go (`*_test.go`, `testdata/`),
Rust (`tests/`). Configuration: `conftest.py`, `pytest.ini`, `tox.ini`, `noxfile.py`, `.coveragerc`, the jest,
vitest, mocha, ava and karma configs, and the test parts of `setup.cfg`, `pyproject.toml` and `package.json`
(those three are shared with the build, so only a change to their test sections counts; a file that does not
parse counts as changed whole).
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from pathlib import PurePosixPath
from typing import Any

TEST_DIRS = {"tests", "test", "__tests__", "testdata", "testing"}
_TEST_NAME = re.compile(r"^(test_.*\.py|.*_test\.py|.*_test\.go|.*\.(test|spec)\.[cm]?[jt]sx?)$")

# Whole files that say how tests run.
# A package's test file, as the package survey (reposwarm/intel/packages.py) and test selection count them
PACKAGE_TEST_NAME = re.compile(r"^(test_.*\.py|.*_test\.py|.*_test\.go|.*\.(test|spec)\.[cm]?[jt]sx?|.*Tests?\.java)$")
_CONFIG_NAME = re.compile(r"^(conftest\.py|pytest\.ini|tox\.ini|noxfile\.py|\.coveragerc|"
                          r"(jest|vitest|vitest\.workspace|karma\.conf|ava\.config|playwright\.config)\.[\w.]+|"
                          r"\.mocharc(\.[\w]+)?)$")
SHARED_CONFIG = ("setup.cfg", "pyproject.toml", "package.json")  # build and tests share them: test sections only

# The test sections of the shared files.
_PYPROJECT_TOOLS = ("pytest", "coverage", "tox", "nox", "hatch")  # hatch: its test environments and scripts
_SETUP_CFG = re.compile(r"^(tool:pytest|pytest|coverage:.*|tox:.*)$")
_PACKAGE_KEYS = ("scripts", "jest", "mocha", "ava", "c8", "nyc", "vitest")


def is_config(path: str) -> bool:
    """A file that configures how tests run (its changes are listed as reconfigured)."""
    return bool(_CONFIG_NAME.match(PurePosixPath(path).name)) or PurePosixPath(path).name in SHARED_CONFIG


def is_test(path: str) -> bool:
    """A test file, a file in a test folder (fixtures, helpers, data), or test configuration."""
    p = PurePosixPath(path)
    return bool(_TEST_NAME.match(p.name)) or any(part in TEST_DIRS for part in p.parts[:-1]) or is_config(path)


def _sections(path: str, text: str | None) -> Any:
    """The test sections of a shared configuration file, comparable between two versions."""
    if text is None:
        return None
    name = PurePosixPath(path).name
    if name == "pyproject.toml":
        tool = tomllib.loads(text).get("tool", {})
        return {k: tool.get(k) for k in _PYPROJECT_TOOLS}
    if name == "package.json":
        data = json.loads(text)
        return {k: data.get(k) for k in _PACKAGE_KEYS} if isinstance(data, dict) else data
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {s: dict(parser[s]) for s in parser.sections() if _SETUP_CFG.match(s)}


def config_change(path: str, old: str | None, new: str | None) -> str:
    """How a lane changed test configuration at `path` ("added", "removed", "changed", "its [tool.pytest]
    section changed"...), or "" when the change to a shared file left its test sections as they were."""
    if not is_config(path) or old == new:
        return ""
    if old is None or new is None:
        return "added" if old is None else "removed"
    if PurePosixPath(path).name not in SHARED_CONFIG:
        return "changed"
    try:
        before, after = _sections(path, old), _sections(path, new)
    except (ValueError, configparser.Error, tomllib.TOMLDecodeError):
        return "changed (it does not parse, so all of it counts)"
    if before == after:
        return ""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return f"its test sections changed: {', '.join(keys)}"
    return "changed"


def is_test_path(path: str) -> bool:
    """A test file, or a file in a test folder (tests/, test/, __tests__/, testdata/...)."""
    name = PurePosixPath(path).name
    return bool(PACKAGE_TEST_NAME.match(name)) or any(part in TEST_DIRS for part in path.split("/")[:-1])
