"""The run_tool activity: one tool call of a lane, against the lane's worktree, ledgered."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry import trace
from temporalio import activity

from activities.repo import lane_worktree
from reposwarm import ledger
from reposwarm.contracts import ToolInput, ToolOutcome
from reposwarm.paths import PathPolicy, ToolRefused
from reposwarm.store import Store, run_dir
from reposwarm.tools import TOOL_ARGS, Toolbox

PREVIEW_CHARS = 300
WRITES = frozenset({"write_file", "edit_file", "delete_file"})


@activity.defn
def run_tool(req: ToolInput) -> ToolOutcome:
    """Execute one tool call of a lane; every outcome, good, bad or refused, goes to the ledger."""
    call = req.call
    worktree = lane_worktree(req.run_id, req.lane)
    store = Store(req.run_id)
    # A tool call runs once: if an earlier attempt got as far as recording its outcome, that is the outcome
    # (an edit_file applied twice would apply twice, or fail on its own first run).
    done = run_dir(req.run_id) / "tool-outcomes" / req.lane / f"r{req.round}.a{req.attempt}.t{req.turn}.{call.id}.json"
    if done.exists():
        return ToolOutcome.model_validate_json(done.read_text(encoding="utf-8"))
    tools = Toolbox(PathPolicy(worktree, req.allowed_paths, req.read_only_paths),
                    store=store, check_profiles=req.check_profiles, default_profile=req.default_profile,
                    default_reason=req.default_reason)
    refused = malformed = False
    arguments, raw = call.arguments, call.raw_arguments
    if call.arguments_ref:  # large arguments were parked in the store by the model turn
        raw = store.get(call.arguments_ref).decode("utf-8")
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            arguments = None
        arguments = arguments if isinstance(arguments, dict) else None
    if call.name in WRITES and isinstance(arguments, dict) and isinstance(arguments.get("path"), str):
        _same_start(tools.policy, store, arguments["path"], done.with_name(done.name + ".before"))
    try:
        malformed = call.error is not None and call.name in TOOL_ARGS
        output, ok = tools.call(call.name, arguments, raw), True
    except ToolRefused as err:
        output, ok, refused, malformed = f"refused: {err}", False, True, call.name not in TOOL_ARGS
    except (ValueError, OSError, UnicodeDecodeError) as err:
        output, ok = f"error: {err}", False
    output = ledger.redact(output)
    output_ref = store.put(output)
    path = arguments.get("path") if isinstance(arguments, dict) else None
    span = trace.get_current_span()
    span.set_attributes({"reposwarm.lane": req.lane, "reposwarm.tool": call.name,
                         "reposwarm.outcome": "refused" if refused else ("ok" if ok else "error")})
    ledger.record_activity(
        req.run_id, "tool_call", lane=req.lane, round=req.round, turn=req.turn,
        reason=tools.edit.reason if tools.edit else None, call_id=call.id, tool=call.name, path=path if isinstance(path, str) else None,
        outcome="refused" if refused else ("ok" if ok else "error"), detail=None if ok else output[:500],
        malformed=malformed,
        output_ref=output_ref,
    )
    # The full output goes to the store; history carries a reference and a short preview.
    outcome = ToolOutcome(call_id=call.id, name=call.name, ok=ok, output=output[:PREVIEW_CHARS],
                          output_ref=output_ref, refused=refused, malformed=malformed, output_chars=len(output),
                          edit=tools.edit)
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(outcome.model_dump_json(), encoding="utf-8")
    return outcome


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
    if before.exists():
        note = json.loads(before.read_text(encoding="utf-8"))
        if note["content_ref"] is None:
            real.unlink(missing_ok=True)
        else:
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_bytes(store.get(note["content_ref"]))
        return
    if real.is_symlink() or (real.exists() and not real.is_file()):
        return  # not a file's content to note: the tool refuses or fails without writing
    before.parent.mkdir(parents=True, exist_ok=True)
    before.write_text(json.dumps({"content_ref": store.put(real.read_bytes()) if real.exists() else None}),
                      encoding="utf-8")
