"""The language caches a check keeps between runs (GOCACHE, GOMODCACHE, cargo's target and registry, npm's and
pip's caches), per worker host and repository. (A stub: binds nothing yet.)"""

from __future__ import annotations

from pathlib import Path

from reposwarm.checks.sandbox import Bind
from reposwarm.contracts import CheckProfile


def prepare(profile: CheckProfile, repo_key: str, scope: str, scratch: Path) -> tuple[list[Bind], dict[str, str]]:
    """The binds and variables of this check's caches. `scope`: "base" (the base commit, or the user's HEAD: it
    writes the host's shared caches), "lane:<run>/<lane>" (a lane's own), "" (a throwaway copy in `scratch`)."""
    return [], {}
