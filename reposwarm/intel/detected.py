"""The check profile detected from a commit of a repository on this host, and why: what a run with no lanes file
checks with (its proposal's profile, reposwarm/intel/layout.py), for `reposwarm checks` with no lanes file and the
pre-flight of such a run (reposwarm/cli/preflight.py). The commit's files are read with git (one batch), never the
working tree; no symbol index is needed."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from reposwarm.intel import layout, packages, structure


def detect_at(repo: Path, rev: str = "HEAD") -> tuple[dict[str, Any] | None, list[str]]:
    """The profile (None: no tests found) and the notes saying what was found, what was chosen and why."""
    entries = layout.tree_entries(repo, rev)
    files = [path for path, _, _ in entries]
    blobs = {path: sha for path, sha, _ in entries}
    texts = layout.read_blobs(repo, {p: blobs[p] for p in packages.manifest_paths(files)})

    def read(path: str) -> str | None:
        if path in texts:
            return texts[path]
        return layout.read_blobs(repo, {path: blobs[path]}).get(path) if path in blobs else None

    # (the interpreter looked for where the checkout at `repo` keeps the project's environment: python_env.py)
    python = functools.cache(functools.partial(structure.python_with_pytest, repo, files, read))
    found, _ = packages.find_packages(files, read, python)
    return structure.detect_profile(files, read, python, packages=found)
