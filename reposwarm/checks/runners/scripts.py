"""`npm test`, `npm run X`, `pnpm test`, `yarn X`: the tree's package.json script, read as the runner's command
when it is one plain command (a runner, maybe after `NAME=value` settings); then that command runs directly,
its program from node_modules/.bin, with npm's extra arguments after it. A script reposwarm cannot read soundly
(`build && vitest`, a pipe, `$VAR`, a pre- or post-script that npm would run too) is no runner, and says why.

And the scripts of pdm, pipenv and hatch, which those tools run in place of a command of the same name."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reposwarm.checks.runners.prefixes import JS_RUNNERS, MAX_DEPTH, View, base, script_name

Look = Callable[[list[str], "Path | None", int], View]
GIVE = "give the runner's command itself"

_OPERATORS = ("&&", "||", ">>", ";;", "|", "&", ";", ">", "<", "(", ")", "$", "`", "\\", "*", "?", "[", "]", "{",
              "}", "~", "#", "\n", "!")


def shell_words(text: str) -> list[str] | str:
    """A script's words, as sh would split them, or the shell construct (`&&`, `|`, `$`, a glob) that makes it
    more than one plain command."""
    words: list[str] = []
    word, quoted, quote = "", False, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote == "'":
            quote, word = ("", word) if ch == "'" else (quote, word + ch)
        elif quote == '"':
            if ch in '$`\\':
                return ch
            quote, word = ("", word) if ch == '"' else (quote, word + ch)
        elif ch in "'\"":
            quote, quoted = ch, True
        elif ch in " \t":
            if word or quoted:
                words.append(word)
            word, quoted = "", False
        elif ch in "".join(_OPERATORS):
            return next(op for op in _OPERATORS if text.startswith(op, i))
        else:
            word += ch
        i += 1
    if quote:
        return "an unclosed quote"
    if word or quoted:
        words.append(word)
    return words


def shell_parts(text: str) -> list[str]:
    """A script cut into the commands its top-level `&&` and `;` chain (quotes kept whole, each part as written):
    `pnpm lint && vitest run` is two parts. What else a part holds (`||`, a pipe, `$VAR`) stays in it, for
    shell_words to name."""
    parts: list[str] = []
    start, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 1
        elif text.startswith("&&", i) or ch == ";":
            parts.append(text[start:i])
            i += 2 if ch == "&" else 1
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _package(cwd: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((cwd / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# the managers' options that run a script somewhere else than this folder's package.json
_ELSEWHERE = {"--prefix", "-C", "--dir", "--cwd", "-w", "--workspace", "--workspaces", "-ws", "--filter", "-F",
              "-r", "--recursive", "--global", "-g"}
_YARN_COMMANDS = {"add", "install", "remove", "upgrade", "why", "workspace", "workspaces", "dlx", "node", "bin",
                  "cache", "config", "info", "init", "link", "unlink", "pack", "publish", "create", "global"}


def _invocation(program: str, rest: list[str]) -> tuple[str, list[str], bool] | str | None:
    """(script name, the arguments it passes on, whether it must be a script), a reason, or None: not a script."""
    i = 1
    while i < len(rest) and rest[i].startswith("-"):
        if rest[i].partition("=")[0] in _ELSEWHERE:
            return f"`{' '.join(rest[:i + 1])}` runs a script of another package: give the runner's command itself"
        i += 1
    command, after = (rest[i], rest[i + 1:]) if i < len(rest) else ("", [])
    if command == "test" or (program != "yarn" and command in ("t", "tst")):
        name, passed, strict = "test", after, True
    elif command in ("run", "run-script", "rum", "urn"):
        j = 0
        while j < len(after) and after[j].startswith("-"):
            if after[j].partition("=")[0] in _ELSEWHERE:
                return f"`{' '.join(rest)}` runs a script of another package: give the runner's command itself"
            j += 1
        if j >= len(after):
            return None
        name, passed, strict = after[j], after[j + 1:], True
    elif program != "npm" and command and command not in _YARN_COMMANDS:
        name, passed, strict = command, after, False  # `yarn jest`: a script, or else the package's own binary
    else:
        return None
    if program == "npm":  # npm keeps its own options (before a `--`) and passes the rest
        cut = passed.index("--") if "--" in passed else len(passed)
        passed = [a for a in passed[:cut] if not a.startswith("-")] + passed[cut + 1:]
    elif passed[:1] == ["--"]:
        passed = passed[1:]
    return name, passed, strict


def invocation(argv: list[str]) -> tuple[str, list[str], bool] | str | None:
    """What `npm test`, `npm run X -- args`, `pnpm X`, `yarn X` run: (the script's name, the arguments passed on to
    it, whether it must be a script rather than the package's binary), why it runs another package's script
    (`pnpm -r test`, `npm test --workspaces`), or None (not a script: `npm ci`, `yarn add`)."""
    program = base(argv[0]) if argv else ""
    return _invocation(program, argv) if program in ("npm", "pnpm", "yarn") else None


def look(program: str, rest: list[str], cwd: Path | None, depth: int, look_at: Look) -> View:
    """The runner an npm, pnpm or yarn command runs through the package's scripts."""
    found = _invocation(program, rest)
    if found is None:
        return View("")
    if isinstance(found, str):
        return View("", why=found)
    name, passed, strict = found
    said = f"`{' '.join(rest)}`"
    package = _package(cwd) if cwd is not None else None
    scripts = package.get("scripts") if package else None
    scripts = scripts if isinstance(scripts, dict) else {}
    script = scripts.get(name)
    if not isinstance(script, str):
        if not strict:  # `yarn jest`, `pnpm vitest run`: the package's binary
            inner = look_at(rest[rest.index(name):], cwd, depth + 1)
            return View(inner.runner, [*rest[:rest.index(name)], *inner.lead], inner.args, inner.why, inner.workdir) \
                if inner.runner else inner
        where = "no package.json" if package is None else f"package.json has no `{name}` script"
        return View("", why=f"{said}: {where} reposwarm can read")
    for hook in (f"pre{name}", f"post{name}"):
        if hook in scripts:
            return View("", why=f"{said} runs `{hook}` too (`{scripts[hook]}`), which the runner's command alone "
                                f"would not: {GIVE}, or fold `{hook}` into the check's setup")
    words = shell_words(script)
    if isinstance(words, str):
        return View("", why=f"{said} runs `{script}`, which reposwarm cannot read per test (a shell "
                            f"`{words.strip() or 'newline'}`): {GIVE}")
    argv = _direct(words, cwd)
    if not argv or depth >= MAX_DEPTH:
        return View("", why=f"{said} runs `{script}`, which reposwarm cannot read per test: {GIVE}")
    if passed and base(argv[0]) in ("npm", "pnpm", "yarn"):
        return View("", why=f"{said} passes its arguments on through `{script}`: {GIVE}")
    inner = look_at([*argv, *passed], cwd, depth + 1)
    if not inner.runner:
        detail = f" ({inner.why})" if inner.why else ""
        return View("", why=f"{said} runs `{script}`, which reposwarm cannot read per test{detail}: {GIVE}")
    return inner


def _direct(words: list[str], cwd: Path | None) -> list[str]:
    """The script as a command run without npm: its `NAME=value` settings (and cross-env's) carried by `env`, its
    program from node_modules/.bin (what npm puts first on PATH), else `npx --no-install` for a known runner."""
    settings: list[str] = []
    while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] == "cross-env"):
        if words[0] != "cross-env":
            settings.append(words[0])
        words = words[1:]
    if not words:
        return []
    program = words[0]
    if "/" not in program and cwd is not None and (cwd / "node_modules" / ".bin" / program).exists():
        head = [f"node_modules/.bin/{program}"]
    elif program in JS_RUNNERS or program == "_mocha":
        head = ["npx", "--no-install", program]
    else:
        head = [program]
    return [*(["env", *settings] if settings else []), *head, *words[1:]]


# --- pdm, pipenv, hatch ------------------------------------------------------------------------------------------

def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def python_script(owner: str, rest: list[str], cwd: Path, hatch_env: str | None) -> str:
    """Why `pdm run X` / `pipenv run X` / `hatch run X` is not the command X ("" when it is): X is one of the
    project's scripts, or (hatch) its environment is a matrix, run once per entry."""
    name = script_name(rest)
    if owner == "pdm":
        tables = [_toml(cwd / "pyproject.toml").get("tool", {}).get("pdm", {}).get("scripts", {})]
    elif owner == "pipenv":
        tables = [_toml(cwd / "Pipfile").get("scripts", {})]
    else:
        envs = _toml(cwd / "pyproject.toml").get("tool", {}).get("hatch", {}).get("envs", {})
        envs = {**envs, **_toml(cwd / "hatch.toml").get("envs", {})}
        env = rest[0].split(":", 1)[0] if ":" in rest[0] else (hatch_env or "default")
        if isinstance(envs.get(env), dict) and envs[env].get("matrix"):
            return f"`hatch run` runs it in each environment of the `{env}` matrix: each writes the same report"
        tables = [e.get("scripts", {}) for e in envs.values() if isinstance(e, dict)]
    if any(isinstance(t, dict) and name in t for t in tables):
        return f"`{owner} run {name}` runs the project's `{name}` script, not the command: {GIVE}"
    return ""
