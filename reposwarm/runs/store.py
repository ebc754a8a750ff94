"""The run's workspace on a worker host, and its content-addressed store.

Large data (file contents, transcripts, logs) lives here and workflow history
carries only references (the claim-check pattern), so histories stay small.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from reposwarm.runs import objects
from reposwarm.runs.objects import check_run_id, home, run_dir

__all__ = ["Store", "check_run_id", "home", "run_dir"]

_REF = re.compile(r"^sha256:[0-9a-f]{64}$")


class Store:
    """Content-addressed blobs of one run: put bytes, get them back by `sha256:<hex>`.

    A blob is the run's file store/<2 hex>/<digest> (reposwarm.runs.objects): local, and in the shared object
    store when one is configured, so a blob put on one host is read on any other.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = check_run_id(run_id)

    @staticmethod
    def _relpath(digest: str) -> str:
        return f"store/{digest[:2]}/{digest}"

    def put(self, data: bytes | str) -> str:
        if isinstance(data, str):
            data = data.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        relpath = self._relpath(digest)
        # a local copy is only ever written after its object (objects.put), so it proves both are there
        if not objects.path(self.run_id, relpath).exists():
            objects.put(self.run_id, relpath, data)
        return f"sha256:{digest}"

    def get(self, ref: str) -> bytes:
        if not _REF.match(ref):
            raise ValueError(f"not a store reference: {ref!r}")
        digest = ref.split(":", 1)[1]
        relpath = self._relpath(digest)
        data = objects.get(self.run_id, relpath)
        if data is None:
            raise FileNotFoundError(f"{ref} is not in the store of this run at {objects.describe(self.run_id, relpath)}")
        return data

    def put_json(self, value: Any) -> str:
        return self.put(json.dumps(value, sort_keys=True, ensure_ascii=False))

    def get_json(self, ref: str) -> Any:
        return json.loads(self.get(ref))
