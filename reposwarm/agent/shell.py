"""A lane's shell: the `run` tool, one command in the lane's worktree, run exactly as a check runs.

The same sandbox as run_checks (reposwarm/checks/sandbox/): the lane's default check profile's network (none
unless it says so), environment (by name only, plus its `env`), limits (time, address space, processes, file
size, output, what the tree may grow by), setup step and caches, and the lane's git view. With no profile
configured, a profile of defaults: no network, the default limits. What the model reads: how the command ended
first ("exit 0", "timed out after 30 s"), then its output (the head and tail of a long one); then what it
changed inside the lane's slice (those files are the lane's change: committed at the turn's checkpoint, listed
as edits "written by `<command>`"), and, as a refusal line, what it changed outside, reverted as after
run_checks.

Whether a lane has it: HelperRole.shell (null: on when the sandbox is, off when REPOSWARM_SANDBOX=off). The
tool is offered to every lane either way (the tool specs are byte-identical across a run's lanes, for prompt
caching) and refused at call time when off.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.agent.specs import RunArgs
from reposwarm.checks import sandbox
from reposwarm.checks.runner import prepared_tree
from reposwarm.contracts import CheckProfile, FileEdit
from reposwarm.runs import ledger
from reposwarm.runs.store import Store
from reposwarm.slices.leftovers import changes
from reposwarm.slices.policy import PathPolicy, ToolRefused
from reposwarm.text import inert, inert_line

DEFAULT_TIMEOUT_S = 120
# With no check profile configured, a tool call's activity has 120 s in all (workflows/options.tool): the command
# gets 90 of them, its git view and the containment after it the rest.
NO_PROFILE_TIMEOUT_S = 90
HEAD_CHARS, TAIL_CHARS = 4000, 8000
SHOWN_CHARS = 120  # of the command, wherever it is named: the output's first line, the ledger, the review
MAX_EDITS = 100  # files a command changed, reported one by one (the rest are committed all the same)
MAX_LISTED = 20  # of those, and of the reverted ones, named in the output
HASH_MAX_BYTES = 16 * 1024 * 1024  # a larger file is told apart by its size and time, not its content
PAST = {"create": "created", "modify": "modified", "delete": "deleted"}
OFF = ("run is off for this lane: its lanes file says shell: false, or the worker runs with REPOSWARM_SANDBOX=off "
       "(and the lane's shell is not set to true); use run_checks and the file tools instead")


def enabled(setting: bool | None) -> bool:
    """Whether a lane may run commands: as its role says, else whenever commands run sandboxed."""
    return sandbox.enabled() if setting is None else setting


def profile_for(profiles: dict[str, CheckProfile], name: str) -> CheckProfile:
    """The lane's default check profile, or one of defaults (no network, default limits) when none is set."""
    found = profiles.get(name)
    # (a profile needs a command; this one is never run: only its sandbox settings are used)
    return found if found is not None else CheckProfile(commands=[["true"]], timeout_s=NO_PROFILE_TIMEOUT_S)


def argv_of(command: list[str] | str) -> list[str]:
    return list(command) if isinstance(command, list) else ["sh", "-c", command]


def shown(command: list[str] | str) -> str:
    """The command on one line, inert and redacted, cut to SHOWN_CHARS."""
    text = inert_line(ledger.redact(command if isinstance(command, str) else shlex.join(command)))
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def head_tail(text: str) -> str:
    """A long output's first HEAD_CHARS and last TAIL_CHARS characters, with how much was cut between them."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    cut = len(text) - HEAD_CHARS - TAIL_CHARS
    return f"{text[:HEAD_CHARS]}\n[... {cut:,} characters cut ...]\n{text[-TAIL_CHARS:]}"


@dataclass
class Ran:
    """What a `run` call did: for the model (text), the lane's edits, the ledger and the review."""

    text: str
    command: str  # shown()
    exit_code: int | None
    timed_out: bool
    line: str  # "$ python gen.py -> exit 0", as the lane's result lists it
    edits: list[FileEdit] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)


def _digest(path: Path) -> str:
    try:
        if path.is_symlink():
            return "link:" + os.readlink(path)
        if not path.is_file():  # gone, a folder, a FIFO: never read (a FIFO would hang the worker)
            return "none" if not os.path.lexists(path) else "other"
        size = path.stat().st_size
        if size > HASH_MAX_BYTES:
            return f"{size}:{path.stat().st_mtime_ns}"
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return "unreadable"


def _state(root: Path) -> dict[str, str]:
    """The worktree's changed paths against HEAD (ignored files aside: never committed) and what each holds."""
    return {c.path: f"{c.code}:{_digest(root / c.path)}" for c in changes(root) if c.code != "!!"}


def _edits(policy: PathPolicy, before: dict[str, str], after: dict[str, str], command: str) -> list[FileEdit]:
    """A FileEdit for every path inside the slice the command changed: new or changed since `before`, or back to
    HEAD (a change of this turn it undid)."""
    edits = []
    for path in sorted(set(before) | set(after)):
        if before.get(path) == after.get(path) or not policy.writable(path):
            continue
        code = after.get(path, "  :")[:2]
        if not (policy.root / path).exists() and not (policy.root / path).is_symlink():
            operation, verb = "delete", "deleted"
        else:
            operation, verb = ("create" if code in ("??", "A ", "AM") else "modify"), "written"
        edits.append(FileEdit(path=path, operation=operation, reason=f"{verb} by `{command}`"))
    return edits


async def _execute(argv: list[str], root: Path, readable: tuple[str, ...], profile: CheckProfile, timeout_s: float,
                   store: Store | None, scope: str) -> tuple[sandbox.Ran | None, list[str], str]:
    """Run `argv` in the tree as run_profile runs a check (its caches, its setup step's folders, its git view);
    the result (None: the setup step failed, and why), and what the setup step did."""
    async with prepared_tree(profile, root, store, readable=readable, scope=scope, reports=False) as (tree, deps):
        if deps.failed is not None:
            return None, deps.lines, f"{deps.failed.reason}\n{deps.failed.output_tail[-2000:]}"
        return await sandbox.run(argv, tree, profile, timeout_s), deps.lines, ""


def _ending(ran: sandbox.Ran, timeout_s: float) -> str:
    if ran.timed_out:
        return f"timed out after {timeout_s:.0f} s"
    if ran.exit_code is None:
        return f"ended at a limit: {ran.stopped or 'killed'}"
    return f"exit {ran.exit_code}"


def run(a: RunArgs, policy: PathPolicy, profile: CheckProfile, *, store: Store | None, scope: str,
        contain: Callable[[], list[str]]) -> Ran:
    """Run the call's command in the sandbox, then contain what it changed (`contain`: run_checks' containment,
    which undoes changes outside the slice and says which)."""
    command = shown(a.command)
    timeout_s = min(a.timeout_s or DEFAULT_TIMEOUT_S, profile.timeout_s)
    readable = (*policy.allowed_patterns, *policy.read_only_patterns)
    before = _state(policy.root)
    started = time.monotonic()
    try:
        # Tools run in the worker's thread pool; the command gets an event loop of its own.
        ran, setup_lines, setup_failed = asyncio.run(_execute(argv_of(a.command), policy.root, readable, profile,
                                                              timeout_s, store, scope))
    except sandbox.SandboxUnavailable as err:
        raise ToolRefused(str(err)) from None
    seconds = time.monotonic() - started
    lines = [f"dependencies: {line}" for line in setup_lines]
    if ran is None:
        ending, exit_code, timed_out = "not run: the check profile's setup step failed", None, False
        lines = [f"{ending}: {setup_failed}", *lines]
    else:
        ending, exit_code, timed_out = _ending(ran, timeout_s), ran.exit_code, ran.timed_out
        output = ledger.redact(ran.output.decode("utf-8", errors="replace"))
        lines = [f"{ending} ({seconds:.1f}s): $ {command}", *lines]
        if not ran.sandboxed:
            lines.append(f"warning: {sandbox.OFF_WARNING}")
        # (inert: a terminal's colours and control bytes are noise to a model, and a NUL no provider takes)
        lines.append(inert(head_tail(output)).rstrip("\n") or "(no output)")
    undone = contain()
    edits = _edits(policy, before, _state(policy.root), command)
    if edits:
        named = ", ".join(f"{e.path} ({PAST[e.operation]})" for e in edits[:MAX_LISTED])
        more = f", and {len(edits) - MAX_LISTED} more" if len(edits) > MAX_LISTED else ""
        lines.append(f"changed in your slice (part of your change, committed after this turn): {named}{more}")
    if undone:
        more = f"; and {len(undone) - MAX_LISTED} more" if len(undone) > MAX_LISTED else ""
        lines.append("refused: the command changed paths outside this lane's slice; reverted: "
                     + "; ".join(undone[:MAX_LISTED]) + more)
    return Ran(text="\n".join(lines), command=command, exit_code=exit_code, timed_out=timed_out,
               line=f"$ {command} -> {ending}", edits=edits[:MAX_EDITS], undone=undone)
