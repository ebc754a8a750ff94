"""Before a command starts anything (a clone of the history, a dev server, a workflow): the toolchains its check
profile needs, found on this host, or one `error:` line naming each missing one and what to install (exit 2).

Only where the checks run here: `try` and `checks` always (their worker is this host's), `run` when its
repository is a folder here and its Temporal server is local (the worker then is too). A run whose worker is
elsewhere (a repository named by URL, a remote TEMPORAL_ADDRESS) is not refused from this host's PATH: its first
check says `command not found: go` on the worker that lacks it (reposwarm/checks/runners/reasons.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from reposwarm.cli.common import UserError
from reposwarm.contracts import CheckProfile, LanesFile
from reposwarm.intel import javascript, toolchain_needs


def profile_of(config: LanesFile) -> CheckProfile | None:
    """The profile a run of this lanes file checks with (TEST_PROFILE, else validation.profile), if it has one."""
    name = os.environ.get("TEST_PROFILE") or config.validation.profile
    return config.validation.profiles.get(name)


def refuse_missing(profile: CheckProfile | dict[str, Any] | None, files: Collection[str] | None = None,
                   read: Callable[[str], str | None] | None = None) -> None:
    """UserError when the profile's commands (its setup's too) need a toolchain this host lacks."""
    if profile is None:
        return
    if isinstance(profile, dict):
        commands = [*profile.get("setup", []), *profile.get("commands", [])]
    else:
        commands = [*profile.setup, *profile.commands]
    hints, problems = javascript.toolchain_hints(files, read)
    uses = {os.path.basename(p) for argv in commands for p in toolchain_needs.programs(argv)}
    said = [why for tool, why in problems.items() if tool in uses]  # (yarn's, where a command runs yarn)
    if (line := toolchain_needs.refusal(commands, hints, said)) is not None:
        raise UserError(line)


def worker_is_local(repo: str) -> bool:
    """Whether a run's checks run on this host: a repository folder here, and a Temporal server on loopback."""
    from reposwarm.cli.local import LOOPBACK, temporal_address
    from reposwarm.vcs.remote import is_url

    return not is_url(repo) and temporal_address()[1] in LOOPBACK


def refuse_run(config: LanesFile, repo: str, rev: str = "HEAD") -> None:
    """`run` with a lanes file: its profile's toolchains, when the worker is this host."""
    if not worker_is_local(repo):
        return
    folder = Path(repo).expanduser().resolve()
    refuse_missing(profile_of(config), *tree_of(folder, rev))


def refuse_proposing(config: LanesFile, repo: Path, rev: str = "HEAD") -> None:
    """`run` with no lanes file: the profile its configuration names, else the one the run will detect from the
    commit (reposwarm/intel/detected.py, as the proposal's layout does), when the worker is this host."""
    if not worker_is_local(str(repo)):
        return
    profile: CheckProfile | dict[str, Any] | None = profile_of(config)
    if profile is None:
        from reposwarm.intel.detected import detect_at

        profile, _ = detect_at(repo, rev)
    refuse_missing(profile, *tree_of(repo, rev))


def tree_of(repo: Path, rev: str) -> tuple[list[str] | None, Callable[[str], str | None]]:
    """The commit's files and a reader of them (what the refusal reads of the project: its package.json)."""
    from reposwarm.cli.common import tracked_files

    return tracked_files(repo, rev), _reader(repo, rev)


def _reader(repo: Path, rev: str) -> Callable[[str], str | None]:
    from reposwarm.vcs import gitcmd

    def read(path: str) -> str | None:
        return gitcmd.show(gitcmd.repo(repo), rev, path)
    return read
