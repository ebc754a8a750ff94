"""Where the agent CLIs' binaries are: installed with reposwarm's `agents` extra (each wheel carries its binary),
or on PATH. Nothing is downloaded: a missing CLI is an error naming what to install.

Claude Code is the binary `claude-agent-sdk` bundles (claude_agent_sdk/_bundled/claude); Codex the one
`openai-codex-cli-bin` ships (codex_cli_bin/bin/codex, with its ripgrep in codex_cli_bin/codex-path). Each
package is found without importing it (importlib's spec), in the Python the worker runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The pinned versions (pyproject.toml's `agents` extra), said in the error a missing CLI raises.
PINS = {"claude-code": "claude-agent-sdk==0.2.189", "codex": "openai-codex-cli-bin==0.163.0"}
_PACKAGE = {"claude-code": ("claude_agent_sdk", "_bundled/claude"), "codex": ("codex_cli_bin", "bin/codex")}
_ON_PATH = {"claude-code": "claude", "codex": "codex"}


class AgentCliMissing(RuntimeError):
    """An agent CLI is not installed: the message says what to install."""


@dataclass(frozen=True)
class AgentCli:
    agent: str  # "claude-code" or "codex"
    binary: Path
    source: str  # "package" (the pinned wheel) or "PATH"
    path_dir: Path | None = None  # a folder of helpers the CLI expects on PATH (Codex's rg), if it ships one

    def version(self) -> str:
        """The CLI's own `--version` line ("2.1.332 (Claude Code)", "codex-cli 0.163.0")."""
        # A home of its own, thrown away after: even `--version` writes its state (Codex its helpers under
        # $CODEX_HOME/tmp, by default ~/.codex; as root, with a HOME that did not exist, it created that HOME).
        with tempfile.TemporaryDirectory(prefix="rs-agent-version-") as home:
            env = {"PATH": os.defpath, "HOME": home, "CODEX_HOME": home, "CLAUDE_CONFIG_DIR": home}
            done = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=60,
                                  stdin=subprocess.DEVNULL, env=env)
        return (done.stdout.strip().splitlines() or [""])[-1]


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find(agent: str) -> AgentCli:
    """The CLI for `agent` ("claude-code" or "codex"): the pinned package's binary first, else one on PATH."""
    if agent not in _PACKAGE:
        raise ValueError(f"unknown agent CLI {agent!r}: one of {', '.join(sorted(_PACKAGE))}")
    package, inside = _PACKAGE[agent]
    folder = _package_dir(package)
    if folder is not None and _executable(folder / inside):
        helpers = folder / "codex-path" if agent == "codex" else None
        return AgentCli(agent, folder / inside, "package", helpers if helpers and helpers.is_dir() else None)
    on_path = shutil.which(_ON_PATH[agent])
    if on_path is not None:
        return AgentCli(agent, Path(on_path), "PATH")
    where = f"{package} is installed but has no {inside}" if folder is not None else f"{package} is not installed"
    raise AgentCliMissing(f"the {agent} CLI is not installed ({where}, and no `{_ON_PATH[agent]}` on PATH): "
                          f"pip install 'reposwarm[agents]' (or pip install '{PINS[agent]}')")
