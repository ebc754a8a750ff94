"""A test runner as people run it: through what comes before it (`env X=1`, `uv run`, `poetry run`, `python -m`,
`npx`, `node path/to/the/runner.js`, an npm script, tox, nox), kept as it is. `look` finds the runner and where
its own arguments start; the reporting flags go there (commands.py).

A command reposwarm cannot read soundly is no runner, and says why where it can (`View.why`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 4  # npm scripts that run npm scripts...


@dataclass(frozen=True)
class View:
    runner: str  # "" when none is known
    lead: list[str] = field(default_factory=list)  # kept as it is: the prefixes and the runner's own program
    args: list[str] = field(default_factory=list)  # the runner's arguments: its reporting flags go among these
    why: str = ""  # when no runner: why, where reposwarm can tell
    workdir: str | None = "."  # where the runner runs, relative to the tree; None: not known (tox, nox)


def base(arg: str) -> str:
    return os.path.basename(arg)


def _name(program: str) -> str:
    """The runner a program is: `.venv/bin/pytest`, `node_modules/.bin/jest`, `node_modules/jest/bin/jest.js`."""
    name = re.sub(r"\.(?:c|m)?js$", "", base(program))
    return {"py.test": "pytest", "_mocha": "mocha"}.get(name, name)


JS_RUNNERS = ("jest", "vitest", "mocha")
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*t?)?$")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# python -m <module>: the modules looked through, or run
_MODULES = ("pytest", "unittest", "coverage", "tox", "nox", "uv", "poetry", "pdm", "hatch", "pipenv")


def _flags(rest: list[str], start: int, valued: set[str]) -> int:
    """Where the options from `start` end (just after a `--`); `valued`: the options that take a value."""
    i = start
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-":
        if rest[i] == "--":
            return i + 1
        name, eq, _ = rest[i].partition("=")
        i += 1 if eq or name not in valued else 2
    return i


def option_value(rest: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the first of `names` given (`--x=v` or `--x v`), or None."""
    for i, a in enumerate(rest):
        if a == "--":
            return None
        key, eq, value = a.partition("=")
        if key in names:
            return value if eq else (rest[i + 1] if i + 1 < len(rest) else "")
    return None


def _inside(workdir: str, step: str) -> str | None:
    joined = os.path.normpath(os.path.join(workdir, step))
    return None if os.path.isabs(step) or joined == ".." or joined.startswith("../") else joined


_UV = {"--with", "--with-editable", "--with-requirements", "--python", "-p", "--package", "--extra", "--group",
       "--no-group", "--only-group", "--index", "--default-index", "--index-url", "-i", "--extra-index-url",
       "--find-links", "-f", "--project", "--env-file", "--directory", "--config-file", "--cache-dir", "--color",
       "--index-strategy", "--keyring-provider", "--resolution", "--prerelease", "--exclude-newer", "--link-mode",
       "--refresh-package", "--reinstall-package", "--upgrade-package", "-P", "--no-binary-package",
       "--no-build-package", "--config-setting", "-C", "--allow-insecure-host", "--python-platform",
       "--no-extra", "--exclude-newer-package"}
_COVERAGE = {"--rcfile", "--source", "--omit", "--include", "--data-file", "--concurrency", "--context", "--debug"}
_NPX = {"-p", "--package", "--cache", "--userconfig"}
_PIPENV = {"--python", "--pypi-mirror"}
_POETRY = {"-P", "--project", "-C", "--directory"}
_PDM = {"--venv", "-p", "--project", "-c", "--config"}


@dataclass(frozen=True)
class _Step:
    taken: int  # how many of the words are the prefix, kept as it is
    workdir: str | None = None  # the folder it runs the rest in, when it changes it
    module: bool = False  # what follows is a python module's name (python -m, coverage run -m)


# Programs that run the command after their options: `timeout 60 pytest`, `nice -n 5 pytest`; their options that
# take a value (given apart), and how many words after the options are theirs (timeout's duration).
_RUNS_AFTER: dict[str, tuple[set[str], int]] = {
    "timeout": ({"-k", "--kill-after", "-s", "--signal"}, 1),
    "nice": ({"-n", "--adjustment"}, 0),
    "nohup": (set(), 0),
    "stdbuf": ({"-i", "-o", "-e", "--input", "--output", "--error"}, 0),
    "ionice": ({"-c", "--class", "-n", "--classdata"}, 0),
    "time": ({"-f", "--format", "-o", "--output"}, 0),
}


def _step(rest: list[str], module: bool) -> _Step | str | None:
    """The prefix `rest` starts with, a reason it cannot be looked through, or None when it is none."""
    program, sub = base(rest[0]), rest[1:2]
    if program == "env":
        return env_step(rest)
    if program in _RUNS_AFTER:
        valued, words = _RUNS_AFTER[program]
        if program == "nice" and re.fullmatch(r"-\d+", rest[1] if len(rest) > 1 else ""):  # nice -5 cmd
            i = 2
        else:
            i = _flags(rest, 1, valued) + words
        return _Step(i) if i < len(rest) else None
    if _PYTHON.match(program):
        return _python(rest)
    if program == "coverage" and sub == ["run"]:
        i = _flags(rest, 2, _COVERAGE)
        if rest[i - 1:i] == ["-m"] or rest[i:i + 1] == ["-m"]:
            return _Step(i + 1 if rest[i:i + 1] == ["-m"] else i, module=True)
        return _Step(i) if i < len(rest) and _name(rest[i]) == "pytest" else None
    if program == "uv":
        return _uv(rest)
    if program == "poetry":
        i = _flags(rest, 1, _POETRY)
        if rest[i:i + 1] != ["run"]:
            return None
        if option_value(rest[:i], tuple(_POETRY)) is not None:
            return f"`poetry {' '.join(rest[1:i])}` runs it for another project: give the command from its folder"
        return _Step(_flags(rest, i + 1, set()))
    if program in ("pdm", "pipenv", "hatch"):
        return _python_tool(rest, program)
    if program == "npx" or (program == "npm" and rest[1:2] in (["exec"], ["x"])):
        start = 1 if program == "npx" else 2
        if option_value(rest[start:], ("-c", "--call")) is not None:
            return None
        i = _flags(rest, start, _NPX)
        return _Step(i) if i < len(rest) else None
    if program in ("pnpm", "yarn") and sub == ["exec"]:
        return _Step(2 + (rest[2:3] == ["--"]))
    if program == "bunx" or (program == "bun" and sub == ["x"]):
        return _Step(_flags(rest, 1 if program == "bunx" else 2, {"-p", "--package"}))
    return None


def env_step(rest: list[str]) -> _Step | str | None:
    i, workdir = 1, "."
    while i < len(rest):
        a = rest[i]
        if a in ("-i", "--ignore-environment", "-"):
            i += 1
        elif a in ("-u", "--unset"):
            i += 2
        elif a.startswith(("--unset=", "-u")):
            i += 1
        elif a in ("-C", "--chdir") or a.startswith("--chdir="):
            where = a.partition("=")[2] if "=" in a else (rest[i + 1] if i + 1 < len(rest) else "")
            inside = _inside(workdir, where)
            if inside is None:
                return f"`env -C {where}` runs it outside the tree"
            workdir, i = inside, i + (1 if "=" in a else 2)
        elif a == "--":
            i += 1
            break
        elif a.startswith("-"):
            return f"`env {a}` is not read by reposwarm: give the command without it"
        elif _ASSIGN.match(a):
            i += 1
        else:
            break
    return _Step(i, workdir) if i < len(rest) else None


def _python(rest: list[str]) -> _Step | None:
    """`python [-X dev -W error -b ...] -m <module>`: the words up to the module's name."""
    i = 1
    while i < len(rest) and rest[i].startswith("-"):
        a = rest[i]
        if a == "-m":
            return _Step(i + 1, module=True) if rest[i + 1:i + 2] and rest[i + 1] in _MODULES else None
        if a.startswith("-c") or a.startswith("-m") or a == "--":
            return None
        i += 2 if a in ("-W", "-X", "-Q") else 1
    return None


def _uv(rest: list[str]) -> _Step | str | None:
    """`uv [global options] run [options] [--] cmd`, or `uv run -m <module>`."""
    i = _flags(rest, 1, _UV)
    if rest[i:i + 1] != ["run"]:
        return None
    where, module, j = option_value(rest[1:i], ("--directory",)), False, i + 1
    while j < len(rest) and rest[j].startswith("-") and rest[j] != "-":
        a = rest[j]
        if a == "--" or a in ("-m", "--module"):
            module, j = a != "--", j + 1
            break
        key, eq, value = a.partition("=")
        if key in ("-s", "--script"):
            return None
        if key == "--directory":
            where = value if eq else (rest[j + 1] if j + 1 < len(rest) else "")
        j += 1 if eq or key not in _UV else 2
    workdir = _inside(".", where) if where else "."
    if workdir is None:
        return f"`uv run --directory {where}` runs it outside the tree"
    return _Step(j, workdir, module=module) if j < len(rest) else None


def _python_tool(rest: list[str], program: str) -> _Step | str | None:
    """`pdm run`, `pipenv run`, `hatch run [ENV:]cmd`: not when the name is one of the project's own scripts,
    which the tool runs instead."""
    valued = {"pdm": _PDM, "pipenv": _PIPENV, "hatch": {"-e", "--env", "-p", "--project", "--data-dir",
                                                        "--cache-dir", "--config", "--color"}}[program]
    i = _flags(rest, 1, valued)
    if rest[i:i + 1] != ["run"]:
        return None
    if program != "pipenv" and option_value(rest[1:i], ("-p", "--project")) is not None:
        return f"`{program} {' '.join(rest[1:i])}` runs it for another project: give the command from its folder"
    j = _flags(rest, i + 1, valued)
    if program == "hatch" and j < len(rest) and rest[j][:1] == "+":
        return f"`hatch run {rest[j]}` selects a matrix: each of its environments writes the same report"
    return _Step(j) if j < len(rest) else None


def programs(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The programs a command runs, as named: its first word, and each one a prefix runs after it (`env X=1 prog`,
    `timeout 60 prog`, `uv run prog`, `poetry run prog`, `hatch run [env:]prog`, `npx prog`, `pnpm exec prog`...),
    outermost first; not a module a Python runs (`python -m pytest`: python alone)."""
    rest = list(argv)
    found: list[str] = []
    while rest:
        program = rest[0]
        if found and base(found[-1]) == "hatch" and ":" in program and not program.startswith("/"):
            program = program.split(":", 1)[1]  # `hatch run test:pytest`: the environment's name, then the program
        found.append(program)
        step = _step(rest, False)
        # (python -m and coverage run take a module or a script: no program of their own after them)
        if not isinstance(step, _Step) or step.module or base(program) == "coverage" or _PYTHON.match(base(program)):
            break
        rest = rest[step.taken:]
    return found


def script_name(rest: list[str]) -> str:
    """The name a `pdm run` / `pipenv run` / `hatch run` command gives, as its scripts would know it."""
    return rest[0].split(":", 1)[-1] if rest else ""


def look(argv: list[str], cwd: Path | None, depth: int = 0) -> View:
    """The runner `argv` runs, looking through the prefixes before it."""
    # (imported here: scripts.py and tox_nox.py look at the commands they find with this module's `look`)
    from reposwarm.checks.runners import scripts, tox_nox

    lead: list[str] = []
    rest = list(argv)
    workdir = "."
    module = False
    owner = ""  # the python tool whose scripts may name the command (pdm, pipenv, hatch)
    while rest:
        step = _step(rest, module)
        if isinstance(step, str):
            return View("", why=step)
        if step is None:
            break
        if base(rest[0]) in ("pdm", "pipenv", "hatch"):
            owner = base(rest[0])
        lead += rest[:step.taken]
        rest = rest[step.taken:]
        module = step.module
        if step.workdir is not None:
            workdir = step.workdir
    if not rest:
        return View("")
    here = cwd / workdir if cwd is not None else None
    if owner and here is not None:
        hatch_env = option_value(lead, ("-e", "--env"))
        why = scripts.python_script(owner, rest, here, hatch_env)
        if why:
            return View("", why=why)
        if owner == "hatch" and ":" in rest[0]:  # `hatch run test:pytest`: the env's name kept, the program looked at
            found = look([rest[0].split(":", 1)[1], *rest[1:]], here, depth + 1)
            return _joined(lead, found, workdir, rest[:1])
    program = base(rest[0])
    if program == "tox" or program == "nox":
        found = tox_nox.look(program, rest, here, look)
    elif program in ("npm", "pnpm", "yarn"):
        found = scripts.look(program, rest, here, depth, look)
    else:
        found = _core(rest, module)
    return _joined(lead, found, workdir)


def _joined(lead: list[str], found: View, workdir: str, program: list[str] | None = None) -> View:
    if not found.runner:
        return found
    inner = found.workdir
    where = None if inner is None else (_inside(workdir, inner) if inner != "." else workdir)
    head = found.lead if program is None else [*program, *found.lead[1:]]
    return View(found.runner, [*lead, *head], found.args, found.why, where)


_NODE_VALUED = {"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions",
                "--env-file", "--title", "--input-type", "--inspect-port", "--stack-size", "--max-old-space-size",
                "--test-reporter", "--test-reporter-destination", "--test-name-pattern", "--test-skip-pattern",
                "--test-concurrency", "--test-timeout", "--test-shard"}


def _core(rest: list[str], module: bool) -> View:
    """The runner `rest` (no prefix left) is."""
    program = base(rest[0])
    name = _name(rest[0])
    if module:
        if name == "unittest":
            return View("unittest", rest[:1], rest[1:])
        return View("pytest", rest[:1], rest[1:]) if name == "pytest" else View("")
    if program in ("pytest", "py.test"):
        return View("pytest", rest[:1], rest[1:])
    if program in ("node", "nodejs"):
        i = 1
        while i < len(rest) and rest[i].startswith("-") and rest[i] != "--":
            if rest[i] == "--test":
                return View("node", rest[:1], rest[1:])
            key, eq, _ = rest[i].partition("=")
            i += 1 if eq or key not in _NODE_VALUED else 2
        if i < len(rest) and rest[i] == "--":
            i += 1
        if i < len(rest) and _js_runner_path(rest[i]):
            return View(_js_runner_path(rest[i]), rest[:i + 1], rest[i + 1:])
        return View("")
    if program == "go":
        return View("go", rest[:2], rest[2:]) if rest[1:2] == ["test"] else View("")
    if program == "cargo":
        i = 1
        while i < len(rest) and rest[i][:1] in ("-", "+"):
            i += 2 if rest[i] in ("--color", "--config", "-Z") else 1
        if rest[i:i + 1] in (["test"], ["t"]):
            return View("cargo", rest[:i + 1], rest[i + 1:])
        if rest[i:i + 1] == ["nextest"]:
            return View("", why="cargo nextest writes a per-test report only where its own configuration says "
                                 "(.config/nextest.toml), which reposwarm does not read: run `cargo test` instead")
        return View("")
    if program in ("jest", "vitest", "mocha", "_mocha"):
        return View(name, rest[:1], rest[1:])
    return View("")


def _js_runner_path(path: str) -> str:
    """The runner a node script is, by its file name or the package folder it lies in: node_modules/.bin/jest,
    node_modules/jest/bin/jest.js, node_modules/vitest/vitest.mjs, node_modules/mocha/bin/mocha.js."""
    name = _name(path)
    if name in JS_RUNNERS:
        return name
    parts = Path(path).parts
    packages = [parts[i + 1] for i, p in enumerate(parts[:-1]) if p == "node_modules"]
    return packages[-1] if packages and packages[-1] in JS_RUNNERS else ""
