"""The interpreter a Python project's checks run, found where its developers keep the project's dependencies.

Why: `python3` on PATH (or reposwarm's own virtual environment) is rarely the interpreter with a project's test
dependencies, and a check run by one without them fails on every tree alike, or, with the project itself installed
there, runs an installed copy (the sandbox puts the tree's import roots first: reposwarm/checks/sandbox/python.py).
In order, the first that imports pytest (else the first found, running unittest):

1. a `.venv` or `venv` in the user's checkout (untracked: one committed to the repository is its author's, never
   run), named by absolute path in the profile: the sandbox binds it read-only, it is never copied into trees;
2. the active VIRTUAL_ENV of the user's shell, when it is not reposwarm's own;
3. a `uv.lock` where uv is installed: a setup step, `uv sync --frozen --no-install-project`, makes `.venv` in the
   checked tree (cached by the lock file) and the checks run `.venv/bin/python`;
4. the environment poetry, pdm, hatch or pipenv keeps for the checkout, as the tool itself says where it is
   (`poetry env info -p`, `pdm info --python`, `hatch env find`, `pipenv --venv`);
5. a tox or nox environment already made in the checkout (`.tox/py312`, `.nox/tests`), where tox or nox is the
   project's way;
6. `python3` on PATH (named `python3`: the lanes file then works on another host too);
7. reposwarm's own interpreter, only when nothing else exists, and said.

Each choice, and each candidate passed over, is said in the notes (`reposwarm try`, `lanes` and `checks` print
them). Asking an interpreter runs it (`-E`, from `/`, a few lines that look pytest up without importing it); asking
a tool runs the user's own tool in the user's own checkout; nothing of a repository's files is run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 30
TOOL_TIMEOUT_S = 30
VENV_NAMES = (".venv", "venv")
UV_SETUP = ["uv", "sync", "--frozen", "--no-install-project"]
UV_PYTHON = ".venv/bin/python"
# pytest looked up, not imported (no plugin runs); where the interpreter's environment is, to tell reposwarm's own
_PROBE = ("import importlib.util, json, sys\n"
          "try:\n    import importlib.metadata as m; v = m.version('pytest')\nexcept Exception:\n    v = None\n"
          "print(json.dumps({'prefix': sys.prefix, 'version': sys.version.split()[0],\n"
          "                  'pytest': v if importlib.util.find_spec('pytest') else None}))\n")


class Interpreter(tuple[str, bool]):
    """(the interpreter as the profile names it, whether it imports pytest): a pair, as the callers of
    reposwarm/intel/structure.py unpack it, carrying the notes that say why and the setup step it needs."""

    notes: tuple[str, ...]
    setup: tuple[tuple[str, ...], ...]

    def __new__(cls, exe: str, has_pytest: bool, notes: Sequence[str] = (),
                setup: Sequence[Sequence[str]] = ()) -> Interpreter:
        made = super().__new__(cls, (exe, has_pytest))
        made.notes = tuple(notes)
        made.setup = tuple(tuple(step) for step in setup)
        return made


@dataclass(frozen=True)
class Candidate:
    exe: str  # as the profile names it
    run: str  # what is run to ask it (an absolute path, or a name on PATH)
    where: str  # where it comes from, in words


@dataclass(frozen=True)
class Probed:
    prefix: Path
    version: str
    pytest: str | None


def probe(exe: str) -> Probed | None:
    """What an interpreter is (None: it does not run)."""
    try:
        done = subprocess.run([exe, "-E", "-c", _PROBE], cwd="/", capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        data = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout else None
        if not isinstance(data, dict):
            return None
        return Probed(Path(str(data.get("prefix"))).resolve(), str(data.get("version")),
                      str(data["pytest"]) if data.get("pytest") else None)
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def own_prefix() -> Path:
    return Path(sys.prefix).resolve()


# --- where the candidates are ---


def _tracked(checkout: Path, names: Sequence[str]) -> set[str]:
    """Which of these top-level names the repository tracks (a committed `.venv` is the author's, never run)."""
    try:
        done = subprocess.run(["git", "-C", str(checkout), "ls-files", "-z", "--", *names], capture_output=True,
                              timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return set(names)
    if done.returncode != 0:
        return set()
    return {p.split("/", 1)[0] for p in done.stdout.decode("utf-8", "replace").split("\0") if p}


def _venv_python(folder: Path) -> Path | None:
    python = folder / "bin" / "python"
    return python if (folder / "pyvenv.cfg").is_file() and os.path.exists(python) else None


def checkout_venvs(checkout: Path) -> list[Candidate]:
    tracked = _tracked(checkout, VENV_NAMES)
    out = []
    for name in VENV_NAMES:
        folder = checkout / name
        if name in tracked or folder.is_symlink():
            continue
        if (python := _venv_python(folder)) is not None:
            out.append(Candidate(str(python), str(python), f"the {name} of your checkout (bound read-only into the "
                                                             "checks, never copied into a tree)"))
    return out


def active_venv() -> list[Candidate]:
    value = os.environ.get("VIRTUAL_ENV")
    if not value or not os.path.isabs(value):
        return []
    folder = Path(value)
    python = _venv_python(folder)
    if python is None or folder.resolve() == own_prefix():
        return []
    return [Candidate(str(python), str(python), f"the active virtual environment (VIRTUAL_ENV={value})")]


def _pyproject(read: Callable[[str], str | None]) -> dict[str, object]:
    try:
        data = tomllib.loads(read("pyproject.toml") or "")
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _has_tool(data: dict[str, object], name: str) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and name in tool


# What in pyproject.toml says a tool keeps the project's environment, not only builds it (hatchling and
# pdm-backend are build backends too: their build settings say nothing of an environment).
_ENV_KEYS = {"poetry": None, "pdm": {"dev-dependencies", "scripts", "venv", "python"}, "hatch": {"envs"},
             "pipenv": set()}


def _keeps_env(data: dict[str, object], name: str) -> bool:
    tool = data.get("tool")
    section = tool.get(name) if isinstance(tool, dict) else None
    if not isinstance(section, dict):
        return False
    wanted = _ENV_KEYS.get(name)
    return wanted is None or bool(wanted & set(section))


def _ask(argv: list[str], checkout: Path) -> str | None:
    """A tool's one-line answer in the checkout (its own environment, not the active one's)."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    try:
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.info("%s: %s", " ".join(argv), err)
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None


# (the tool, the files that say the project uses it, the question that names its environment, and whether the
# answer is the interpreter itself or the environment's folder)
_TOOLS: tuple[tuple[str, tuple[str, ...], list[str], bool], ...] = (
    ("poetry", ("poetry.lock",), ["poetry", "env", "info", "-p"], False),
    ("pdm", ("pdm.lock",), ["pdm", "info", "--python"], True),
    ("hatch", ("hatch.toml",), ["hatch", "env", "find"], False),
    ("pipenv", ("Pipfile", "Pipfile.lock"), ["pipenv", "--venv"], False),
)


def tool_envs(checkout: Path, files: Collection[str], data: dict[str, object], notes: list[str]) -> list[Candidate]:
    out = []
    for tool, markers, question, is_python in _TOOLS:
        if not (any(m in files for m in markers) or _keeps_env(data, tool)):
            continue
        if shutil.which(tool) is None:
            notes.append(f"Python: the project uses {tool}, which is not installed here: its environment was not "
                         "looked for")
            continue
        answer = _ask(question, checkout)
        path = Path(answer) if answer and os.path.isabs(answer) else None
        python = path if is_python else (_venv_python(path) if path is not None else None)
        if python is None or not python.exists():
            notes.append(f"Python: `{' '.join(question)}` named no environment for {checkout} (make one with "
                         f"`{tool} install`)")
            continue
        out.append(Candidate(str(python), str(python), f"{tool}'s environment for your checkout "
                                                       f"(`{' '.join(question)}`)"))
    return out


def test_envs(checkout: Path, files: Collection[str], data: dict[str, object]) -> list[Candidate]:
    """tox's and nox's environments already made in the checkout, where the project runs its tests with them."""
    out = []
    for folder, used in ((".tox", "tox.ini" in files or "tox.toml" in files or _has_tool(data, "tox")),
                         (".nox", "noxfile.py" in files)):
        if not used or folder in _tracked(checkout, [folder]) or not (checkout / folder).is_dir():
            continue
        try:
            envs = sorted((p for p in (checkout / folder).iterdir() if p.is_dir() and not p.is_symlink()),
                          key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            continue
        for env in envs[:8]:
            if (python := _venv_python(env)) is not None:
                out.append(Candidate(str(python), str(python), f"the {folder[1:]} environment {env.name} of your "
                                                                 "checkout"))
    return out


def uv_choice(files: Collection[str], read: Callable[[str], str | None], notes: list[str]) -> Interpreter | None:
    if "uv.lock" not in files:
        return None
    if shutil.which("uv") is None:
        notes.append("Python: uv.lock, but uv is not installed here: no `uv sync` setup step (install uv, or make "
                     "the checkout's .venv with `uv sync`)")
        return None
    has_pytest = 'name = "pytest"' in (read("uv.lock") or "")
    why = (f"Python interpreter: {UV_PYTHON}, made in each checked tree by the setup step `{' '.join(UV_SETUP)}` "
           "from uv.lock (cached by the lock file; the tree's own code runs from its import roots)")
    if not has_pytest:
        why += "; uv.lock has no pytest: unittest"
    return Interpreter(UV_PYTHON, has_pytest, [why], [UV_SETUP])


def find(checkout: Path | None = None, files: Collection[str] = (),
         read: Callable[[str], str | None] | None = None) -> Interpreter:
    """The interpreter for the checks of the project whose tracked `files` these are (`read`: a file's text),
    whose checkout on this machine is `checkout` (None: none, as for a bare repository)."""
    read = read or (lambda path: None)
    notes: list[str] = []
    data = _pyproject(read) if "pyproject.toml" in files else {}
    here = checkout is not None and checkout.is_dir()
    envs = [*checkout_venvs(checkout), *active_venv()] if checkout is not None and here else active_venv()
    if (found := _first_with_pytest(envs, notes)) is not None:
        return found
    uv = uv_choice(files, read, notes)
    if uv is not None and uv[1]:
        return Interpreter(uv[0], True, [*notes, *uv.notes], uv.setup)
    kept = [*tool_envs(checkout, files, data, notes), *test_envs(checkout, files, data)] \
        if checkout is not None and here else []
    python3 = shutil.which("python3")
    system = [Candidate("python3", python3, "python3 on PATH")] if python3 is not None else []
    if (found := _first_with_pytest([*kept, *system], notes)) is not None:
        return found
    # no interpreter with pytest: the project's own environment with unittest, before reposwarm's own
    if uv is not None:
        return Interpreter(uv[0], False, [*notes, *uv.notes], uv.setup)
    project = next(iter([*envs, *kept]), None)
    if project is None and (ours := _own(notes)) is not None:
        return ours
    exe = project.exe if project is not None else "python3"
    notes.append(f"Python interpreter: {exe}{f' ({project.where})' if project else ''}; no interpreter found here "
                 "imports pytest: unittest (install pytest into it, then use [python, -m, pytest, -q])")
    return Interpreter(exe, False, notes)


def _first_with_pytest(candidates: Sequence[Candidate], notes: list[str]) -> Interpreter | None:
    seen: set[Path] = set()
    for candidate in candidates:
        probed = probe(candidate.run)
        if probed is None:
            notes.append(f"Python: {candidate.exe} ({candidate.where}) does not run: passed over")
            continue
        if probed.prefix in seen:
            continue
        seen.add(probed.prefix)
        if probed.prefix == own_prefix() and candidate.exe == "python3":
            notes.append("Python: python3 on PATH is reposwarm's own virtual environment: passed over")
            continue
        if probed.pytest is None:
            notes.append(f"Python: {candidate.exe} ({candidate.where}) has no pytest: passed over")
            continue
        notes.append(f"Python interpreter: {candidate.exe}, {candidate.where}; Python {probed.version}, "
                     f"pytest {probed.pytest}")
        return Interpreter(candidate.exe, True, notes)
    return None


def _own(notes: list[str]) -> Interpreter | None:
    probed = probe(sys.executable)
    if probed is None or probed.pytest is None:
        return None
    notes.append(f"Python interpreter: {sys.executable}, reposwarm's own virtual environment, since no other "
                 f"interpreter here imports pytest: the checks see only its packages (make a .venv in your "
                 f"checkout with the project's test dependencies, and propose again)")
    return Interpreter(sys.executable, True, notes)
