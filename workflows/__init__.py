"""Temporal workflows: they decide; activities do."""


def root_cause(err: BaseException) -> str:
    """The innermost failure's message: 'Activity task failed' says less than what failed in it."""
    while getattr(err, "cause", None) is not None:
        err = err.cause  # type: ignore[attr-defined]
    return str(err) or type(err).__name__
