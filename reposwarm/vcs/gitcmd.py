"""The one way the worker runs git: trusting nothing a lane or the repository could have planted.

A lane's worktree shares the user's git directory, and a lane's checks run code it wrote; git must not run a
hook, an fsmonitor, a pager, or another command named by configuration while the worker drives it. Every
git the worker runs gets the same overrides, through git's own environment-config mechanism
(GIT_CONFIG_COUNT/KEY/VALUE, git >= 2.31), which outranks every config file:

    core.hooksPath=/dev/null   no hook runs (post-commit, post-checkout, reference-transaction...)
    core.fsmonitor=false       no fsmonitor command
    core.pager=cat, core.editor=:, sequence.editor=:   no pager, no editor (GIT_PAGER/GIT_EDITOR too)
    protocol.ext.allow=never   no ext:: transport (a command as a "remote")
    protocol.file.allow=user   no file:// transport git chooses itself (a submodule's url = ../x)
    submodule.recurse=false, fetch/push.recurseSubmodules, status.submoduleSummary=false, diff.ignoreSubmodules
                               never into a submodule or a nested repository
    *.gpgSign=false, log.showSignature=false   no gpg.program, for signing or for checking

Submodules and nested repositories are where planted configuration lives: a lane cannot write the shared git
directory (not through its tools, not from inside the sandbox), but a check it wrote can `git init` a folder of
its worktree and give that repository a `filter.<name>.clean` command; any git that enters it runs that
command as the worker. So the worker's git never enters one: besides the settings above, every status, diff,
show and log gets `--ignore-submodules=all` on its command line (only the flag stops git from reading
`.gitmodules`, where a `submodule.<name>.update = !cmd` makes git die), and diffs get `--no-ext-diff
--no-textconv`; reposwarm/slices/leftovers.py removes every nested `.git` a lane leaves. What still runs is named
only by the user's own config files (a credential helper, core.sshCommand, an LFS filter), which nothing a
lane or a repository writes can reach.

Use `repo(path)` for GitPython and `run(...)` for a plain subprocess; `SAFE_ENV` for anything else. The
small helpers below (`try_git`, `rev`, `is_ancestor`, `show`, `IDENTITY`) are the calls every activity makes;
ref names are in reposwarm/vcs/branches.py, which workflows read without running git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import git

OVERRIDES = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "core.pager": "cat",
    "core.editor": ":",
    "sequence.editor": ":",
    "protocol.ext.allow": "never",
    "protocol.file.allow": "user",
    "submodule.recurse": "false",
    "fetch.recurseSubmodules": "false",
    "push.recurseSubmodules": "no",
    "status.submoduleSummary": "false",
    "diff.ignoreSubmodules": "all",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "push.gpgSign": "false",
    "log.showSignature": "false",
    "gc.auto": "0",  # no background `git gc --auto` racing the lanes
}
# (environment variables outrank the config keys above: a worker started with GIT_EDITOR set must not keep it)
FIXED_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat", "GIT_EDITOR": ":",
             "GIT_SEQUENCE_EDITOR": ":"}
# Subcommands that would look into a submodule, with the flags that keep them out (and run no diff driver).
NO_SUBMODULES = {"status": ("--ignore-submodules=all",)} | dict.fromkeys(
    ("diff", "diff-index", "diff-files", "diff-tree", "show", "log"),
    ("--ignore-submodules=all", "--no-ext-diff", "--no-textconv"))
_GLOBAL_WITH_VALUE = {"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env", "--exec-path"}


def hardened(args: list[str]) -> list[str]:
    """git's arguments (without "git") with NO_SUBMODULES' flags right after the subcommand that needs them."""
    i = 0
    while i < len(args) and args[i].startswith("-"):  # global options before the subcommand
        i += 2 if args[i] in _GLOBAL_WITH_VALUE else 1
    if i < len(args) and args[i] in NO_SUBMODULES:
        return [*args[:i + 1], *NO_SUBMODULES[args[i]], *args[i + 1:]]
    return list(args)


def _env() -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(OVERRIDES)), **FIXED_ENV}
    for i, (key, value) in enumerate(OVERRIDES.items()):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


SAFE_ENV = _env()


# commits the worker makes (checkpoints, merges, resolutions): a fixed author, never signed with the user's key
IDENTITY = ["-c", "user.name=reposwarm", "-c", "user.email=reposwarm@localhost", "-c", "commit.gpgsign=false"]


class _HardenedGit(git.Git):
    """GitPython's command object, every command line of which goes through `hardened`."""

    def execute(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(command, (list, tuple)) and command and Path(str(command[0])).name == "git":
            command = [command[0], *hardened([str(a) for a in command[1:]])]
        return super().execute(command, *args, **kwargs)


def repo(path: str | Path) -> git.Git:
    """A GitPython command object at `path` whose every git call carries the overrides."""
    g = _HardenedGit(str(path))
    g.update_environment(**SAFE_ENV)
    return g


def _with_env(kwargs: dict[str, Any]) -> dict[str, Any]:
    """kwargs for subprocess with the overrides in the environment (a given `env` adds to ours)."""
    return {**kwargs, "env": {**os.environ, **SAFE_ENV, **(kwargs.get("env") or {})}}


def run(args: list[str], cwd: str | Path | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """`git <args>` as a subprocess with the overrides (kwargs as for subprocess.run; `env` adds to ours)."""
    return subprocess.run(["git", *hardened(args)], cwd=cwd, **_with_env(kwargs))


def popen(args: list[str], cwd: str | Path | None = None, **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen(["git", *hardened(args)], cwd=cwd, **_with_env(kwargs))


def try_git(g: git.Git, *args: str, keep_newline: bool = False) -> tuple[int, str, str]:
    """`git <args>` that may fail: (status, stdout, stderr), never an exception."""
    status, out, err = g.execute(["git", *args], with_extended_output=True, with_exceptions=False,
                                 strip_newline_in_stdout=not keep_newline)
    return status, out, err


def healthy_worktree(path: Path) -> bool:
    """A worktree git can work in: its metadata is there, `git status` runs, and no index.lock was left (by a
    git killed with its worker: every later git in the worktree would refuse to run)."""
    wt = repo(str(path))
    status, git_dir, _ = try_git(wt, "rev-parse", "--git-dir")
    if status != 0 or not (path / git_dir.strip()).exists():
        return False
    status, _, _ = try_git(wt, "status", "--porcelain")
    return status == 0 and not (path / git_dir.strip() / "index.lock").exists()


def mend_worktree_registrations(g: git.Git) -> list[str]:
    """Forget the worktree registrations an add killed half-way left unreadable, and name them.

    `git worktree add` writes `.git/worktrees/<name>/` (gitdir, commondir, HEAD) before it checks the files out;
    a worker killed in between can leave `commondir` or `gitdir` empty, and from then on every `git worktree add`
    of the repository fails reading it ("failed to read .git/worktrees/api/commondir"), whichever worktree it
    adds. Such a registration points at nothing usable (its worktree is made again, healthy_worktree), so it
    goes; a registration git can read is never touched."""
    status, common, _ = try_git(g, "rev-parse", "--git-common-dir")
    if status != 0:
        return []
    base = Path(common.strip())
    if not base.is_absolute():
        base = Path(g.working_dir or ".") / base
    mended = []
    for entry in sorted((base / "worktrees").glob("*")) if (base / "worktrees").is_dir() else []:
        try:
            readable = all((entry / name).read_text().strip() for name in ("commondir", "gitdir"))
        except OSError:
            readable = False
        if not readable:
            shutil.rmtree(entry, ignore_errors=True)
            mended.append(entry.name)
    return mended


def rev(g: git.Git, ref: str) -> str | None:
    """The commit `ref` names, or None."""
    status, out, _ = try_git(g, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    return out.strip() if status == 0 and out.strip() else None


def is_ancestor(g: git.Git, older: str, newer: str) -> bool:
    return try_git(g, "merge-base", "--is-ancestor", "--end-of-options", older, newer)[0] == 0


def show(g: git.Git, rev: str, path: str) -> str | None:
    """A file's text at a commit, or None when it has no such file."""
    status, out, _ = try_git(g, "show", "--end-of-options", f"{rev}:{path}", keep_newline=True)
    return out if status == 0 else None
