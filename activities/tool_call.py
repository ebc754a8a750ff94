"""The run_tool activity: one tool call of a lane, against the lane's worktree, ledgered."""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path
from typing import Any

from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import TemporalError

from activities.repo import lane_worktree
from reposwarm.agent.specs import TOOL_ARGS
from reposwarm.agent.tools import Toolbox
from reposwarm.checks.runner import load_baseline
from reposwarm.contracts import ToolInput, ToolOutcome
from reposwarm.runs import ledger, objects
from reposwarm.runs.exactly_once import Once, keyed_path
from reposwarm.runs.store import Store, home
from reposwarm.slices.policy import PathPolicy, ToolRefused

PREVIEW_CHARS = 300
WRITES = frozenset({"write_file", "edit_file", "delete_file"})
# An absolute path left in an error once the worktree's own is gone: cut to its last part, as
# workflows.short_reason does. It starts the text or follows a space, quote, bracket, '=' or ':' (the
# slashes of a relative path, "api/x/y", follow a name, and are left alone).
_ABSOLUTE_PATH = re.compile(r"(?<![^\s'\"(\[=:,])/(?:[^\s/:'\"]+/)+([^\s/:'\"]*)")


def outcome_path(run_id: str, lane: str, round_no: int, attempt: int, turn: int, call_id: str) -> Path:
    """Where a tool call's outcome is recorded: by lane, then by the turn that made the call, and the call id
    (the model's own, so only ever hashed)."""
    return keyed_path(run_id, "tool-outcomes", call_id, folder=lane, label=f"r{round_no}.a{attempt}.t{turn}.",
                      digits=32)


def _sanitized(text: str, roots: list[Path], strip_all: bool) -> str:
    """An error as the model may see it: the worktree is ".", and (for errors the tools did not word
    themselves) no other absolute path of the worker's disk is left; the raw error goes to the ledger."""
    for root in sorted({str(r) for r in roots}, key=len, reverse=True):  # a longer spelling first
        text = text.replace(root, ".")
    text = text.replace(str(home()), "$REPOSWARM_HOME")
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1) or "/", text) if strip_all else text


def _nul_in(arguments: dict[str, Any] | None) -> str | None:
    """The argument holding a NUL byte, if one does: no file name, text or commit message takes one."""
    stack: list[tuple[str, Any]] = list((arguments or {}).items())
    while stack:
        name, value = stack.pop()
        if isinstance(value, str) and "\x00" in value:
            return name
        if isinstance(value, dict):
            stack += [(name, v) for v in value.values()]
        elif isinstance(value, list):
            stack += [(name, v) for v in value]
    return None


@activity.defn
def run_tool(req: ToolInput) -> ToolOutcome:
    """Execute one tool call of a lane; every outcome, good, bad or refused, goes to the ledger.

    Whatever the call holds, it ends as an outcome the model reads (ok, an error, or a refusal), never as
    an exception that fails the activity: a malformed call is answered with its error, a refused one with
    the reason, and a tool that fails with what went wrong, in words that name no path of the worker's disk.
    """
    return answer(req)


def answer(req: ToolInput, *, in_turn: bool = False) -> ToolOutcome:
    """run_tool's work, in its activity or (in_turn) in the model turn that made the call (activities/model.py):
    there the call has a span of its own, and its ledger lines are keyed by the call, since one activity
    then answers several calls."""
    if not in_turn:
        return _answer(req, "")
    with _TRACER.start_as_current_span("run_tool", attributes={"reposwarm.in_turn": True}):
        return _answer(req, req.call.id)


_TRACER = trace.get_tracer(__name__)


def _answer(req: ToolInput, part: str) -> ToolOutcome:
    call = req.call
    worktree = lane_worktree(req.run_id, req.lane)
    store = Store(req.run_id)
    # A tool call runs once: if an earlier attempt got as far as recording its outcome, that is the outcome
    # (an edit_file applied twice would apply twice, or fail on its own first run).
    done = Once(outcome_path(req.run_id, req.lane, req.round, req.attempt, req.turn, call.id), ToolOutcome)
    if (recorded := done.recorded()) is not None:
        return recorded
    tools = Toolbox(PathPolicy(worktree, req.allowed_paths, req.read_only_paths),
                    store=store, check_profiles=req.check_profiles, default_profile=req.default_profile,
                    default_reason=req.default_reason, baseline=lambda: load_baseline(req.run_id), shell=req.shell)
    refused = malformed = False
    raw_error: str | None = None
    arguments, raw = call.arguments, call.raw_arguments
    try:
        if call.arguments_ref:  # large arguments were parked in the store by the model turn
            raw = store.get(call.arguments_ref).decode("utf-8")
            try:
                arguments = json.loads(raw)
            except (ValueError, RecursionError):
                arguments = None
            arguments = arguments if isinstance(arguments, dict) else None
        if call.error is not None:
            # The model turn found the call malformed (unknown tool, bad arguments, too deep, a bad id): it is
            # answered with that error and never run, whatever its arguments would do.
            malformed = True
            if call.name not in TOOL_ARGS:
                raise ToolRefused(call.error)
            raise ValueError(call.error)
        if (where := _nul_in(arguments)) is not None:
            raise ToolRefused(f"argument {where!r} holds a NUL byte; tools take text, and paths never hold one")
        if call.name in WRITES and isinstance(arguments, dict) and isinstance(arguments.get("path"), str):
            _same_start(tools.policy, store, arguments["path"], done.path.with_name(done.path.name + ".before"))
        output, ok = tools.call(call.name, arguments, raw), True
    except ToolRefused as err:
        output, ok, refused = f"refused: {err}", False, True
        malformed = malformed or call.name not in TOOL_ARGS
    except (ValueError, OSError) as err:  # a failed call (UnicodeDecodeError is a ValueError)
        output, ok = f"error: {err}", False
    except TemporalError:
        raise  # a cancellation of the activity, not an outcome of the tool
    except Exception as err:  # noqa: BLE001 - a tool's bug must not fail the lane: the model is told, the ledger keeps it
        output, ok = f"error: {call.name} failed unexpectedly ({type(err).__name__}: {err})", False
        raw_error = "".join(traceback.format_exception(err))[-4000:]
    if not ok:
        # refusals and malformed calls are worded here and in reposwarm (relative paths, and the model's own
        # text); other errors come from the OS, git or a bug, and may name any path
        shown = _sanitized(output, [tools.policy.root, worktree], strip_all=not (refused or malformed))
        raw_error = raw_error or (output if shown != output else None)  # what the model was not shown
        output = shown
    output = ledger.redact(output)
    output_ref = store.put(output)
    if tools.undone:  # a check's leftovers outside the slice (or a nested repository), reverted and told
        ledger.record_part(req.run_id, "slice_refused", part, lane=req.lane, at=call.name, call_id=call.id,
                               detail=ledger.redact("; ".join(tools.undone))[:2000])
    path = arguments.get("path") if isinstance(arguments, dict) else None
    span = trace.get_current_span()
    span.set_attributes({"reposwarm.lane": req.lane, "reposwarm.tool": call.name,
                         "reposwarm.outcome": "refused" if refused else ("ok" if ok else "error")})
    ledger.record_part(
        req.run_id, "tool_call", part, lane=req.lane, round=req.round, turn=req.turn,
        reason=tools.edit.reason if tools.edit else None, call_id=call.id, tool=call.name,
        path=path if isinstance(path, str) else None,
        outcome="refused" if refused else ("ok" if ok else "error"), detail=None if ok else output[:500],
        malformed=malformed, output_ref=output_ref, **({"raw_error": raw_error} if raw_error else {}),
        # a `run` call: the command, how it ended, and the files it changed inside the slice
        **({"command": ran.command, "exit_code": ran.exit_code, "timed_out": ran.timed_out,
            "changed": [e.path for e in ran.edits] or None} if (ran := tools.ran) is not None else {}),
    )
    # The full output goes to the store; history carries a reference and a short preview.
    return done.record(ToolOutcome(call_id=call.id, name=call.name, ok=ok, output=output[:PREVIEW_CHARS],
                                   output_ref=output_ref, refused=refused, malformed=malformed,
                                   output_chars=len(output), edit=tools.edit,
                                   ran=tools.ran.line if tools.ran is not None else "", edits=tools.edits))


def _same_start(policy: PathPolicy, store: Store, path: str, before: Path) -> None:
    """Every attempt of a write starts from the file as the first attempt found it.

    An attempt that died after its write and before recording its outcome left the file changed: an edit_file
    run again on it would not find its `old` text, a delete_file its file. The first attempt notes the file's
    content (or its absence) before writing; a later attempt puts that back, then writes as the first did.
    Nothing else writes the file meanwhile: a lane's tool calls run one at a time, each after the last ended.
    """
    try:
        _, real = policy.for_write(path)
    except ToolRefused:
        return  # the call itself will be refused, having written nothing
    noted = objects.read_file(before)  # the note is a file of the run, so a retry on another host finds it too
    if noted is not None:
        note = json.loads(noted)
        if note["content_ref"] is None:
            real.unlink(missing_ok=True)
        else:
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_bytes(store.get(note["content_ref"]))
        return
    if real.is_symlink() or (real.exists() and not real.is_file()):
        return  # not a file's content to note: the tool refuses or fails without writing
    objects.write_file(before, json.dumps({"content_ref": store.put(real.read_bytes()) if real.exists() else None})
                       .encode())
