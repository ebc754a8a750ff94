"""LaneWorkflow: one helper agent working in its own worktree and branch.

The loop is small on purpose: a model turn (activity), its tool calls (one
activity each, path-guarded), a checkpoint commit after any turn that changed
files, until finish or a budget. The workflow only decides; every side effect
is an activity, so a killed worker resumes without redoing a completed call.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.model import model_turn
    from activities.repo import checkpoint_lane, create_lane_worktree, describe_lane
    from activities.tools import FinishArgs, parse_args, run_tool
    from reposwarm.contracts import (
        ChangeSet,
        CheckpointInput,
        FileEdit,
        HelperTask,
        LaneResult,
        LaneState,
        LaneStatus,
        ModelTurnInput,
        ToolInput,
        Usage,
    )
    from reposwarm.prompts import lane_first_message

GIT = dict(start_to_close_timeout=timedelta(minutes=5), retry_policy=RetryPolicy(maximum_attempts=5))
MODEL = dict(start_to_close_timeout=timedelta(minutes=10),
             retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=6))
MAX_MALFORMED = 3  # consecutive replies with no usable tool call before the lane gives up


@workflow.defn
class LaneWorkflow:
    def __init__(self) -> None:
        self._state = LaneState(lane="", state="starting")

    @workflow.query
    def progress(self) -> LaneState:
        return self._state

    @workflow.run
    async def run(self, task: HelperTask) -> LaneResult:
        self._state = LaneState(lane=task.lane, state="running", goal=task.goal)
        started = workflow.now()
        await workflow.execute_activity(create_lane_worktree, task, **GIT)

        pending: list[dict[str, Any]] = [{"role": "user", "content": lane_first_message(task)}]
        transcript_ref: str | None = None
        usage = Usage()
        edits: dict[str, FileEdit] = {}
        finish: FinishArgs | None = None
        status, reason = LaneStatus.budget_exhausted, f"turn budget of {task.role.max_turns} used up"
        tool_calls = refusals = malformed = turn = 0

        for turn in range(task.role.max_turns):
            if usage.total_tokens >= task.role.token_budget:
                reason = f"token budget of {task.role.token_budget} used up ({usage.total_tokens} spent)"
                break
            result = await workflow.execute_activity(
                model_turn,
                ModelTurnInput(run_id=task.run_id, agent=task.lane, round=task.round, turn=turn, model=task.model,
                               transcript_ref=transcript_ref, new_messages=pending),
                **MODEL,
            )
            transcript_ref, usage, pending = result.transcript_ref, usage + result.usage, []
            self._state.turns, self._state.tokens = turn + 1, usage.total_tokens

            if not result.tool_calls:
                malformed += 1
                if malformed >= MAX_MALFORMED:
                    status, reason = LaneStatus.failed, f"{malformed} replies in a row without a tool call"
                    break
                pending.append({"role": "user", "content": "Use the tools to do the work; call finish when done."})
                continue
            malformed = 0

            changed = False
            for call in result.tool_calls:
                tool_calls += 1
                if call.name == "finish":
                    try:
                        finish = parse_args("finish", call.arguments, call.raw_arguments)  # type: ignore[assignment]
                        pending.append({"role": "tool", "tool_call_id": call.id, "content": "finished"})
                    except ValueError as err:
                        pending.append({"role": "tool", "tool_call_id": call.id, "content": f"error: {err}"})
                    continue
                outcome = await workflow.execute_activity(
                    run_tool,
                    ToolInput(run_id=task.run_id, lane=task.lane, call=call, allowed_paths=task.allowed_paths,
                              read_only_paths=task.read_only_paths, check_profile=task.check_profile,
                              default_reason=result.content[:200]),
                    start_to_close_timeout=timedelta(
                        seconds=(task.check_profile.timeout_s if task.check_profile else 0) + 120),
                    heartbeat_timeout=timedelta(seconds=60),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                )
                refusals += outcome.refused
                if outcome.edit is not None:
                    edits[outcome.edit.path] = _merge_edit(edits.get(outcome.edit.path), outcome.edit)
                    changed = True
                pending.append({"role": "tool", "tool_call_id": call.id, "content_ref": outcome.output_ref})
            self._state.tool_calls = tool_calls

            if changed:
                await workflow.execute_activity(
                    checkpoint_lane,
                    CheckpointInput(run_id=task.run_id, lane=task.lane,
                                    message=f"reposwarm {task.lane}: checkpoint after turn {turn + 1}\n\n"
                                            + "\n".join(f"- {e.path}: {e.reason}" for e in edits.values())),
                    **GIT,
                )
            if finish is not None:
                status, reason = LaneStatus.done, ""
                break

        described = await workflow.execute_activity(describe_lane, task, **GIT)
        head, stat = described.pop("__head__"), described.pop("__stat__")
        final_edits = []
        for path, letter in sorted(described.items()):
            operation = {"A": "create", "D": "delete"}.get(letter, "modify")
            edit = edits.get(path)
            reason_text = edit.reason if edit else "changed by the lane outside its recorded edits"
            final_edits.append(FileEdit(path=path, operation=operation, reason=reason_text,
                                        content_ref=edit.content_ref if edit and operation != "delete" else None))
        self._state.state = status.value
        self._state.reason = reason
        return LaneResult(
            lane=task.lane, status=status, reason=reason, usage=usage, turns=min(turn + 1, task.role.max_turns),
            tool_calls=tool_calls, refusals=refusals,
            elapsed_s=(workflow.now() - started).total_seconds(),
            changeset=ChangeSet(task_id=task.task_id, edits=final_edits, summary=finish.summary if finish else reason,
                                assumptions=finish.assumptions if finish else [], diff_stat=stat, head_sha=head),
        )


def _merge_edit(earlier: FileEdit | None, later: FileEdit) -> FileEdit:
    """Several edits to one file become one, keeping every distinct reason."""
    if earlier is None:
        return later
    reasons = earlier.reason if later.reason in earlier.reason else f"{earlier.reason}; {later.reason}"
    operation = "create" if earlier.operation == "create" and later.operation != "delete" else later.operation
    return FileEdit(path=later.path, operation=operation, reason=reasons, content_ref=later.content_ref)
