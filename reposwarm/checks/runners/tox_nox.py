"""`tox -e ENV` and `nox -s SESSION`: pytest, when the environment's (the session's) configuration clearly runs
pytest with the command's extra arguments ({posargs}, session.posargs); then pytest's reporting flags go after
`--`. Anything less clear (several environments or sessions, commands that depend on factors, posargs given to
more than one command or with a default that reposwarm would replace) is no runner, and says why."""

from __future__ import annotations

import ast
import configparser
import re
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reposwarm.checks.runners.prefixes import View

Look = Callable[[list[str], "Path | None", int], View]
POSARGS = re.compile(r"^\{posargs(?::([^{}]*))?\}$")


def look(program: str, rest: list[str], cwd: Path | None, look_at: Look) -> View:
    cut = rest.index("--") if "--" in rest else len(rest)
    options, posargs = rest[1:cut], rest[cut + 1:]
    picked = _tox(options) if program == "tox" else _nox(options)
    if isinstance(picked, str) or cwd is None:
        return View("", why=picked if isinstance(picked, str) else "")
    found = _tox_commands(cwd, picked) if program == "tox" else _nox_session(cwd, picked, options)
    if isinstance(found, str):
        return View("", why=f"`{' '.join(rest[:cut])}` is not read per test: {found}")
    command, default = found
    inner = look_at(command, cwd, 1)
    if inner.runner != "pytest":
        return View("", why=f"`{' '.join(rest[:cut])}` runs `{' '.join(command)}`, which is not pytest: reposwarm "
                            "reads tox and nox per test only when they run pytest")
    lead = [*rest[:cut], "--"]
    # (no extra arguments: tox and nox would put the default in their place, which ours would replace)
    return View("pytest", lead, posargs or default, workdir=None)


_TOX_VALUED = {"--result-json", "--installpkg", "--hashseed", "--discover", "--workdir", "-i", "--index-url",
               "--exit-and-dump-after", "--runner"}


def _tox(options: list[str]) -> str | list[str]:
    """The one environment `tox [run] -e ENV` runs, or why not."""
    args = options[1:] if options[:1] in (["run"], ["r"]) else options
    envs: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-e", "--env") or (a.startswith("-e") and len(a) > 2 and not a.startswith("--")):
            value = a[2:] if a not in ("-e", "--env") else (args[i + 1] if i + 1 < len(args) else "")
            envs += [e for e in value.split(",") if e]
            i += 1 if a not in ("-e", "--env") else 2
            continue
        if a.partition("=")[0] in ("-c", "--conf", "-x", "--override", "-m", "--labels", "-f", "--factors",
                                   "--root", "-p", "--parallel") or not a.startswith("-"):
            return f"`tox {' '.join(options)}` is more than one environment reposwarm can read per test"
        i += 2 if a in _TOX_VALUED else 1
    if len(envs) != 1:
        return ("`tox` without one `-e ENV` runs every environment of its envlist, each writing the same report: "
                "name one environment")
    return envs


def _commands_ini(text: str, env: str, section_prefix: str = "testenv") -> str | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(text)
    if any(s.startswith(f"{section_prefix}:") and "{" in s for s in parser.sections()):
        raise ValueError("its environments are generated ([testenv:py{...}])")
    for section in (f"{section_prefix}:{env}", section_prefix):
        if parser.has_option(section, "commands"):
            return parser.get(section, "commands")
    return None


def _tox_commands(cwd: Path, envs: list[str]) -> str | tuple[list[str], list[str]]:
    env = envs[0]
    lines: list[list[str]] | None = None
    try:
        if (cwd / "tox.ini").is_file():
            text = _commands_ini((cwd / "tox.ini").read_text(encoding="utf-8"), env)
            lines = _ini_lines(text) if text is not None else None
        elif (cwd / "tox.toml").is_file() or (cwd / "pyproject.toml").is_file():
            data = tomllib.loads(((cwd / "tox.toml") if (cwd / "tox.toml").is_file() else cwd / "pyproject.toml")
                                 .read_text(encoding="utf-8"))
            tox = data if (cwd / "tox.toml").is_file() else data.get("tool", {}).get("tox", {})
            if isinstance(tox.get("legacy_tox_ini"), str):
                text = _commands_ini(tox["legacy_tox_ini"], env)
                lines = _ini_lines(text) if text is not None else None
            else:
                lines = _toml_lines(tox, env)
        elif (cwd / "setup.cfg").is_file():
            text = _commands_ini((cwd / "setup.cfg").read_text(encoding="utf-8"), env, "testenv")
            lines = _ini_lines(text) if text is not None else None
    except (OSError, ValueError, configparser.Error, tomllib.TOMLDecodeError) as problem:
        return f"its configuration is not one reposwarm reads ({problem})"
    if lines is None:
        return f"no tox configuration of environment `{env}` that reposwarm can read"
    return _posargs_line(lines)


def _ini_lines(text: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", text)
    lines = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if re.match(r"^[\w\-,!{}.]+:\s", line):
            raise ValueError(f"a command for some factors only: `{line}`")
        if "{[" in line or "{env:" in line:
            raise ValueError(f"a substitution: `{line}`")
        lines.append(_words(line))
    return lines


def _words(line: str) -> list[str]:
    """A tox command's words, a {posargs:default} one word however many spaces its default holds."""
    held: list[str] = []

    def hold(match: re.Match[str]) -> str:
        held.append(match.group(0))
        return f"\0{len(held) - 1}\0"

    words = shlex.split(re.sub(r"\{posargs(?::[^{}]*)?\}", hold, line))
    return [re.sub(r"\0(\d+)\0", lambda m: held[int(m.group(1))], w) for w in words]


def _toml_lines(tox: dict[str, Any], env: str) -> list[list[str]] | None:
    table = tox.get("env", {}).get(env) if isinstance(tox.get("env"), dict) else None
    commands = (table or {}).get("commands", tox.get("env_run_base", {}).get("commands"))
    if commands is None:
        return None
    if not isinstance(commands, list):
        raise ValueError("its commands are a substitution")
    lines = []
    for command in commands:
        words = []
        for word in command if isinstance(command, list) else [None]:
            if isinstance(word, str):
                words.append(word)
            elif isinstance(word, dict) and word.get("replace") == "posargs" and word.get("extend") and all(
                    isinstance(d, str) for d in word.get("default", [])):
                words.append("{posargs:" + " ".join(word.get("default", [])) + "}")
            else:
                raise ValueError(f"a command reposwarm cannot read: {command!r}")
        lines.append(words)
    return lines


def _posargs_line(lines: list[list[str]]) -> str | tuple[list[str], list[str]]:
    """The one command that takes the posargs: its words without them, and their default."""
    if any("[]" in line for line in lines):
        return "its posargs are given as `[]`"
    taking = [line for line in lines if any("{posargs" in w for w in line)]
    if len(taking) != 1:
        return "no command takes its {posargs}" if not taking else "more than one command takes its {posargs}"
    line = taking[0]
    if line[0].startswith("-"):
        return f"`{' '.join(line)}` may fail without failing tox"
    words: list[str] = []
    default: list[str] = []
    for word in line:
        match = POSARGS.match(word)
        if match is None and "{" in word:
            return f"a substitution in `{' '.join(line)}`: `{word}`"
        if match is None:
            words.append(word)
            continue
        default = shlex.split(match.group(1) or "")
        if any("{" in d for d in default):
            return f"its {{posargs}} default is a substitution: `{word}`"
    return words, default


# --- nox ----------------------------------------------------------------------------------------------------------

def _nox(options: list[str]) -> str | list[str]:
    sessions: list[str] = []
    i = 0
    while i < len(options):
        a = options[i]
        if a in ("-s", "-e", "--session", "--sessions"):
            i += 1
            while i < len(options) and not options[i].startswith("-"):
                sessions.append(options[i])
                i += 1
            continue
        if a.partition("=")[0] in ("-k", "--keywords", "-t", "--tags", "-f", "--noxfile", "--force-python"):
            return f"`nox {' '.join(options)}` is more than one session reposwarm can read per test"
        i += 2 if a in ("-p", "--python", "--pythons", "--envdir", "--extra-python", "--extra-pythons") else 1
    if len(sessions) != 1:
        return ("`nox` without one `-s SESSION` runs several sessions, each writing the same report: "
                "name one session")
    return sessions


def _decorator(node: ast.FunctionDef) -> ast.expr | None:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if (isinstance(target, ast.Attribute) and target.attr == "session") or \
                (isinstance(target, ast.Name) and target.id == "session"):
            return deco
    return None


def _nox_session(cwd: Path, sessions: list[str], options: list[str]) -> str | tuple[list[str], list[str]]:
    try:
        tree = ast.parse((cwd / "noxfile.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return "no noxfile.py reposwarm can read"
    wanted = sessions[0]
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or (deco := _decorator(node)) is None:
            continue
        keywords = {k.arg: k.value for k in deco.keywords} if isinstance(deco, ast.Call) else {}
        given = keywords.get("name")
        name = str(given.value) if isinstance(given, ast.Constant) else node.name
        pythons = keywords.get("python")
        versions = [str(e.value) for e in pythons.elts if isinstance(e, ast.Constant)] \
            if isinstance(pythons, (ast.List, ast.Tuple)) else []
        if wanted != name and wanted not in (f"{name}-{v}" for v in versions):
            continue
        if len(node.decorator_list) > 1:
            return f"session `{name}` is parametrized"
        if wanted == name and len(versions) > 1 and not any(o in ("-p", "--python", "--pythons") for o in options):
            return f"session `{name}` runs once for each of its Pythons ({', '.join(map(str, versions))})"
        return _session_run(node)
    return f"noxfile.py has no session `{wanted}` reposwarm can read"


def _session_run(node: ast.FunctionDef) -> str | tuple[list[str], list[str]]:
    """The one `session.run("pytest", ..., *session.posargs)` of a session, at the top of its body."""
    if not node.args.args:
        return "its session takes no argument"
    me = node.args.args[0].arg
    mentions = [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == "posargs"
                and isinstance(n.value, ast.Name) and n.value.id == me]
    runs = [s.value for s in node.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Attribute) and s.value.func.attr == "run"
            and isinstance(s.value.func.value, ast.Name) and s.value.func.value.id == me
            and any(isinstance(a, ast.Starred) and a.value in mentions for a in s.value.args)]
    if len(runs) != 1 or len(mentions) != 1:
        return "its session does not pass session.posargs to exactly one session.run, as `*session.posargs`"
    call = runs[0]
    if call.keywords and any(k.arg == "success_codes" for k in call.keywords):
        return "its session.run takes success_codes: failing tests may not fail it"
    words = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if len(words) != len(call.args) - 1 or not isinstance(call.args[-1], ast.Starred):
        return "its session.run's words are not all plain strings, with *session.posargs last"
    return words, []
