"""Exactly once: a side effect's result, recorded as a file of the run, so that a retry (on any host) returns it.

Temporal retries an activity whose worker died before reporting back, and the retry would repeat what the
first attempt did: pay for a model call again, apply an edit twice. So an activity asks its record first
("done already? here is the result") and, when there is none, does the effect and records the result:

    done = Once(keyed_path(run_id, "replies", request_text), ModelReply)
    if (reply := done.recorded()) is not None:
        return reply
    reply = ...the effect...
    return done.record(reply)

Record last, once every other trace of the effect (ledger line, recording) is written: a record is the
proof that all of it happened, so a retry that finds one may skip all of it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel

from reposwarm.runs import objects
from reposwarm.runs.ledger import redact
from reposwarm.runs.objects import run_dir

Result = TypeVar("Result", bound=BaseModel)


def keyed_path(run_id: str, kind: str, key: str, *, folder: str | None = None, label: str = "",
               digits: int = 64) -> Path:
    """Where the record of the effect named `key` lives: runs/<run>/<kind>/<folder>/<label><hash of key>.json.

    The key is only ever hashed, so whatever it holds (a call id the model chose, like "/../../x" or one
    300 characters long; a whole model request) names a file like any other. `folder` defaults to the
    hash's first two digits, which keeps folders small. `label` and `digits` exist for names that must stay
    as older workers wrote them: old and new workers run side by side during a deploy, and each must find
    the other's records (tool outcomes are named r<round>.a<attempt>.t<turn>.<32 digits>.json).
    """
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:digits]
    return run_dir(run_id) / kind / (digest[:2] if folder is None else folder) / f"{label}{digest}.json"


class Once(Generic[Result]):
    """The record of one side effect's result, at `path`, read back as a `shape`.

    `redacted` records are written with the worker's secrets taken out, for results that may quote them
    (a model's reply); a result the activity has already redacted where it matters (a tool's output) is
    kept as returned, so a retry returns exactly what the first attempt did.
    """

    def __init__(self, path: Path, shape: type[Result], *, redacted: bool = False) -> None:
        # a record in a run's folder is that run's file (reposwarm.runs.objects), so any host finds it
        self.path, self.shape, self.redacted = path, shape, redacted

    def recorded(self) -> Result | None:
        """The result an earlier attempt recorded, or None if it recorded none.

        A record that cannot be read counts as none, and the effect is done again as the first attempt did:
        records are written atomically, so such a record is one cut short by a kill when writes were not
        (older versions), or one a redaction made invalid.
        """
        data = objects.read_file(self.path)
        if data is None:
            return None
        try:
            return self.shape.model_validate_json(data.decode("utf-8"))
        except ValueError:  # not JSON, not UTF-8, or not of the shape (pydantic's ValidationError is one)
            return None

    def record(self, result: Result) -> Result:
        """Record the result (write-then-rename: a worker killed while writing leaves no half record for the
        next attempt to trip on) and return it as given."""
        text = result.model_dump_json()
        objects.write_file(self.path, (redact(text) if self.redacted else text).encode("utf-8"))
        return result
