"""The setup step of a check profile (a stub for now)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reposwarm.checks import sandbox
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure
from reposwarm.runs.store import Store


@dataclass
class Prepared:
    binds: list[sandbox.Bind] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    failed: CommandResult | None = None
    failure: TestFailure | None = None


async def prepare(profile: CheckProfile, tree: sandbox.Tree, repo_key: str, store: Store | None) -> Prepared:
    return Prepared()
