"""The toolchains a check profile's commands need (go, cargo, mvn/gradle/java, node, npm, pnpm, yarn, bun), found
where the checks will look for them, or the run refused before it starts, naming what to install.

Why: a check that cannot find its program fails on the base commit and on every tree alike ("command not found:
go"), after the history was cloned and the lanes ran; said before anything starts, it costs the user one line.
Where the checks run on this host (`reposwarm try`, `reposwarm checks`, a run whose worker is local), the
sandbox sees the worker's PATH (reposwarm/checks/sandbox/toolchains.py: rustup's proxies resolved), so a tool
is there when it is on that PATH, or named by an absolute path that is an executable.

Only the toolchains are checked (a program of the tree, `node_modules/.bin/jest`, comes from the tree or the
setup step; any other program is left to the check, which names it when it is missing). A package manager that
only corepack provides counts as missing: corepack downloads the manager the first time it runs, and nothing
downloads a binary at run time (the checks' HOME is private, so corepack's own cache is not there either).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.runners import prefixes

# what to install for each toolchain's program, as a line a user can act on
INSTALL = {
    "go": "apt-get install golang-go, or https://go.dev/dl",
    "gofmt": "apt-get install golang-go, or https://go.dev/dl",
    "cargo": "rustup (https://rustup.rs), or apt-get install cargo",
    "rustc": "rustup (https://rustup.rs), or apt-get install rustc",
    "mvn": "apt-get install maven default-jdk",
    "gradle": "apt-get install gradle default-jdk",
    "java": "apt-get install default-jdk",
    "javac": "apt-get install default-jdk",
    "node": "apt-get install nodejs, or nvm",
    "nodejs": "apt-get install nodejs",
    "npm": "apt-get install npm",
    "npx": "apt-get install npm",
    "pnpm": "npm i -g pnpm@9",
    "yarn": "npm i -g yarn@1",
    "bun": "npm i -g bun",
    "bunx": "npm i -g bun",
    "deno": "npm i -g deno, or https://deno.com",
}
# programs that are node scripts once installed (npm i -g): they need node as well
ON_NODE = frozenset({"npm", "npx", "pnpm", "yarn"})
# a project's own wrappers that download their tool and run it on a JDK
JAVA_WRAPPERS = frozenset({"gradlew", "mvnw"})
# programs that run the command after their options (`env -C web X=1 pnpm exec jest`, `timeout 60 go test`)
# package managers whose next program is one of the tree's own (node_modules/.bin): it needs no toolchain of its own
FROM_THE_TREE = {"npx", "pnpm", "yarn", "bunx", "bun", "npm"}


@dataclass(frozen=True)
class Need:
    tool: str  # the program, as commands name it
    command: str  # the first command that needs it
    where: str | None  # where it is (None: not found)
    hint: str  # what to install


def search_path() -> str:
    """The PATH the checks' sandbox gives its commands on this host: the worker's, rustup's real toolchain first."""
    from reposwarm.checks.sandbox.toolchains import sandbox_path

    return sandbox_path(Path.home(), None) or os.environ.get("PATH", "")


def corepack_shim(path: str) -> bool:
    """Whether a program found on PATH is corepack's shim (`corepack enable`), which downloads the manager."""
    try:
        real = os.path.realpath(path)
    except OSError:
        return False
    return "/corepack/" in real.replace(os.sep, "/")


def find(tool: str, path: str | None = None) -> str | None:
    """Where the checks would find `tool`: on the sandbox's PATH, or itself when an absolute executable; None
    when it is not there or only corepack's shim is."""
    if os.path.isabs(tool):
        return tool if os.path.isfile(tool) and os.access(tool, os.X_OK) else None
    found = shutil.which(tool, path=search_path() if path is None else path)
    return None if found is None or corepack_shim(found) else found


@functools.lru_cache(maxsize=32)
def version(path: str) -> str | None:
    """`path --version`'s first line ("9.15.9", "v20.20.2"), or None when it does not answer in 20 s."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "COREPACK_ENABLE_DOWNLOAD_PROMPT": "0",
                                   "npm_config_manage_package_manager_versions": "false"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip()[:60] if done.returncode == 0 and lines else None


def programs(argv: Iterable[str]) -> list[str]:
    """The programs a command needs from the host, outermost first: its first word, and the one `env`, `timeout`,
    `nice`, `uv run`... run after their options (reposwarm/checks/runners/prefixes.py reads them as the sandbox
    binds them). What `npx`, `pnpm exec`, `yarn`... run comes from the tree's node_modules: not a toolchain."""
    out: list[str] = []
    for program in prefixes.programs(list(argv)):
        out.append(program)
        if os.path.basename(program) in FROM_THE_TREE:
            break
    return out


def needs(commands: Iterable[Iterable[str]], hints: Mapping[str, str] | None = None,
          path: str | None = None) -> list[Need]:
    """The toolchains the commands need, each once, found or not (`hints`: what to install, where the project
    says more than INSTALL does: `npm i -g pnpm@10.28.0` for its packageManager)."""
    hints = {**INSTALL, **(hints or {})}
    seen: dict[str, Need] = {}
    for argv in commands:
        argv = list(argv)
        line = " ".join(argv)
        for program in programs(argv):
            name = os.path.basename(program)
            wanted = [program] if name in INSTALL and "/" not in program or os.path.isabs(program) else []
            if name in ON_NODE:
                wanted.append("node")
            if name in JAVA_WRAPPERS or name in ("mvn", "gradle"):
                wanted.append("java")
            for tool in wanted:
                if tool in seen or (os.path.isabs(tool) and os.path.basename(tool) not in INSTALL):
                    continue
                where = find(tool, path)
                seen[tool] = Need(tool, line, where, hints.get(os.path.basename(tool), INSTALL.get(tool, "")))
    return list(seen.values())


def missing(commands: Iterable[Iterable[str]], hints: Mapping[str, str] | None = None,
            path: str | None = None) -> list[Need]:
    return [n for n in needs(commands, hints, path) if n.where is None]


def refusal(commands: Iterable[Iterable[str]], hints: Mapping[str, str] | None = None,
            problems: Iterable[str] = (), path: str | None = None) -> str | None:
    """One line refusing a run whose checks need a toolchain that is not where they run, naming each and what
    to install (`problems`: what else makes a found tool unusable, said by the ecosystem's detection); None
    when every one is there."""
    gone = missing(commands, hints, path)
    said = [f"{n.tool} is not installed where the checks run (needed by `{_short(n.command)}`): install it"
            + (f" ({n.hint})" if n.hint else "") for n in gone]
    said += list(problems)
    if not said:
        return None
    return "; ".join(said) + "; then run this again. Without it every check fails, on the base commit too (or give " \
        "a profile this host can run: --lanes FILE)"


def found_lines(commands: Iterable[Iterable[str]], hints: Mapping[str, str] | None = None,
                path: str | None = None) -> list[str]:
    """A note on the toolchains the commands need: where each was found (and its version, for node and the
    package managers), or that it is missing and what to install."""
    out: list[str] = []
    for need in needs(commands, hints, path):
        if need.where is None:
            out.append(f"toolchain: {need.tool} is NOT installed where the checks run (needed by "
                       f"`{_short(need.command)}`): {need.hint}; runs and `reposwarm try` refuse to start without it")
            continue
        shown = version(need.where) if os.path.basename(need.tool) in ("node", "pnpm", "yarn", "bun", "npm") else None
        out.append(f"toolchain: {need.tool}{' ' + shown if shown else ''} at {need.where}")
    return out


def _short(command: str) -> str:
    return command if len(command) <= 80 else command[:77] + "..."
