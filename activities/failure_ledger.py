"""An activity's failure, whole, goes to the run's ledger; what travels on is one line.

A status or a review package shows why a lane failed in one line with no worker paths (workflows
`short_reason`); the traceback and the full message, which a person debugging the worker needs, are
written here, redacted, once per attempt.
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from reposwarm.runs import ledger


def _run_id(args: Any) -> str | None:
    """The run an activity works for: every input contract of ours carries its run_id."""
    first = args[0] if args else None
    run_id = getattr(first, "run_id", None)
    return run_id if isinstance(run_id, str) and run_id else None


class _LedgerFailures(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self.next.execute_activity(input)
        except Exception as err:
            run_id = _run_id(input.args)
            if run_id is not None:
                info = activity.info()
                with contextlib.suppress(OSError):  # the ledger's own trouble must not hide the failure
                    ledger.record(
                        run_id, "activity_error",
                        key=f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}/error/{info.attempt}",
                        workflow_id=info.workflow_id, activity=info.activity_type, attempt=info.attempt,
                        error=f"{type(err).__name__}: {err}"[:2000],
                        traceback="".join(traceback.format_exception(err))[-8000:])
            raise


class FailureLedgerInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _LedgerFailures(next)
