"""The run's workspace on a worker host, and its content-addressed store.

Large data (file contents, transcripts, logs) lives here and workflow history
carries only references (the claim-check pattern), so histories stay small.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REF = re.compile(r"^sha256:[0-9a-f]{64}$")


def home() -> Path:
    """Where this worker keeps worktrees and stores (REPOSWARM_HOME, default ~/.reposwarm)."""
    return Path(os.environ.get("REPOSWARM_HOME") or Path.home() / ".reposwarm").resolve()


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} must be letters, digits, '.', '_' or '-' (at most 128)")
    return run_id


def run_dir(run_id: str) -> Path:
    return home() / "runs" / check_run_id(run_id)


class Store:
    """Content-addressed blobs of one run: put bytes, get them back by `sha256:<hex>`."""

    def __init__(self, run_id: str) -> None:
        self.root = run_dir(run_id) / "store"

    def put(self, data: bytes | str) -> str:
        if isinstance(data, str):
            data = data.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest[:2] / digest
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # write-then-rename, so a crash never leaves a half blob under a valid name
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return f"sha256:{digest}"

    def get(self, ref: str) -> bytes:
        if not _REF.match(ref):
            raise ValueError(f"not a store reference: {ref!r}")
        digest = ref.split(":", 1)[1]
        path = self.root / digest[:2] / digest
        if not path.exists():
            raise FileNotFoundError(f"{ref} is not in the store of this run at {self.root}")
        return path.read_bytes()

    def put_json(self, value: Any) -> str:
        return self.put(json.dumps(value, sort_keys=True, ensure_ascii=False))

    def get_json(self, ref: str) -> Any:
        return json.loads(self.get(ref))
