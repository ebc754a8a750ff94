"""Failures as a person reads them: in a run's status, a lane's result, a review package."""

from __future__ import annotations

import re


def root_cause(err: BaseException) -> str:
    """The innermost failure's message: 'Activity task failed' says less than what failed in it."""
    while getattr(err, "cause", None) is not None:
        err = err.cause  # type: ignore[attr-defined]
    return str(err) or type(err).__name__


_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s/:'\"]+/)+([^\s/:'\"]*)")


def short_reason(err: BaseException, limit: int = 300) -> str:
    """A failure as one line a person reads in a status or a review: the root cause's first line, with
    absolute paths of the worker's disk cut to their last part (the whole error is in the ledger)."""
    text = root_cause(err).strip().splitlines()[0] if root_cause(err).strip() else type(err).__name__
    text = _ABSOLUTE_PATH.sub(lambda m: m.group(1) or "/", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
