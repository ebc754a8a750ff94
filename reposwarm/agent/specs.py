"""The lanes' tools as a public interface: their names and arguments, and their JSON-schema specs as offered to
models. Pure (pydantic only): workflow code (the dry-run estimate) and the MCP server read it as the tools do."""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFileArgs(_Args):
    """Read lines of a file (1-based, inclusive range)."""

    path: str
    start_line: int | None = Field(default=None, ge=1)
    end_line: int | None = Field(default=None, ge=1)


class ListDirArgs(_Args):
    """List the entries of a folder; folders end with '/'."""

    path: str = "."


class SearchArgs(_Args):
    """Search the lane's readable files for a regular expression (git grep -E)."""

    pattern: str = Field(min_length=1)
    paths: list[str] | None = None


class SymbolLookupArgs(_Args):
    """Find where a symbol is defined, then where it is referenced."""

    symbol: str = Field(pattern=r"^[A-Za-z_$][A-Za-z0-9_$.]*$")


class WriteFileArgs(_Args):
    """Create or replace a file inside the lane's allowed paths."""

    path: str
    content: str
    reason: str | None = Field(default=None, description="why this edit is made (at least 12 characters)")


class EditFileArgs(_Args):
    """Replace exactly one occurrence of `old` with `new` in a file."""

    path: str
    old: str = Field(min_length=1)
    new: str
    reason: str | None = Field(default=None, description="why this edit is made (at least 12 characters)")


class DeleteFileArgs(_Args):
    """Delete a file inside the lane's allowed paths."""

    path: str
    reason: str | None = Field(default=None, description="why this file goes (at least 12 characters)")


class RunChecksArgs(_Args):
    """Run the configured check commands in the lane's worktree: the tests your change affects (scope), or with
    `tests` only those (in seconds), judged against the same tests on the base commit."""

    profile: str | None = None
    tests: list[str] | None = Field(default=None, max_length=200, description=(
        "only these tests, as their runner names them: pytest files or node ids (tests/test_x.py::test_a), unittest "
        "dotted ids, node/jest/vitest test files (jest, vitest: also FILE::TEST NAME), go packages (./pkg/...) or "
        "tests (TestName, pkg/path.TestName), cargo filters (tests::adds) or CRATE::FILTER; omit for the tests "
        "your change affects"))
    scope: Literal["affected", "all"] = Field(default="affected", description=(
        "without tests: `affected` (default) runs only the tests that import, directly or not, a file you changed "
        "(the whole command where that cannot be told); `all` runs every test of the profile"))


MAX_COMMAND_CHARS = 65_536  # a longer command belongs in a script (write_file, then run it)


class RunArgs(_Args):
    """Run one command in the worktree, in the checks' sandbox (no secrets; the check profile's network, none by
    default, and limits): its exit code and output. Changes outside your slice are undone; files it writes inside
    are yours."""

    command: list[str] | str = Field(description="an argv list, or a line run by sh -c")
    timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                    description="seconds (default 120, at most the profile's)")

    @field_validator("command")
    @classmethod
    def _a_command(cls, command: list[str] | str) -> list[str] | str:
        if isinstance(command, list) and (not command or not command[0].strip()):
            raise ValueError("an argv list starts with the program to run")
        if isinstance(command, str) and not command.strip():
            raise ValueError("the command line is empty")
        size = len(command) if isinstance(command, str) else sum(len(a) + 1 for a in command)
        if size > MAX_COMMAND_CHARS:
            raise ValueError(f"the command is {size:,} characters, over {MAX_COMMAND_CHARS:,}; write a script "
                             "with write_file and run that")
        return command


class FinishArgs(_Args):
    """End the lane's work with a summary of what was done."""

    summary: str = Field(min_length=1)
    assumptions: list[str] = []


# The lane's own tool: it ends the lane's work, and no worker runs it (reposwarm/agent/conversation.py handles it).
FINISH = "finish"

TOOL_ARGS: dict[str, type[_Args]] = {
    "read_file": ReadFileArgs,
    "list_dir": ListDirArgs,
    "search": SearchArgs,
    "symbol_lookup": SymbolLookupArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "delete_file": DeleteFileArgs,
    "run_checks": RunChecksArgs,
    "run": RunArgs,
    FINISH: FinishArgs,
}


def tool_specs() -> list[dict[str, Any]]:
    """JSON-schema specs of the tools, as offered to models (a fresh copy of specs made once: pydantic's schema
    generation took 7% of a worker's time at 32 lanes when made every turn); the copy is parsed from their JSON,
    three times as fast as a deep copy."""
    return json.loads(_tool_specs_json())


@functools.cache
def _tool_specs_json() -> str:
    return json.dumps(_tool_specs())


def _tool_specs() -> list[dict[str, Any]]:
    specs = []
    for name, model in TOOL_ARGS.items():
        schema = model.model_json_schema()
        schema.pop("title", None)
        description = schema.pop("description", "")
        specs.append({"name": name, "description": description, "parameters": schema})
    return specs


def parse_args(name: str, arguments: dict[str, Any] | None, raw: str) -> _Args:
    """Validate a call's arguments; the ValueError's message is what the model sees."""
    if name not in TOOL_ARGS:
        raise ValueError(f"unknown tool {name!r}; the tools are: {', '.join(TOOL_ARGS)}")
    if arguments is None:
        raise ValueError(f"arguments of {name} were not a JSON object: {raw[:200]!r}")
    try:
        return TOOL_ARGS[name].model_validate(arguments)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in err.errors())
        raise ValueError(f"bad arguments for {name}: {problems}") from None


# --- the proposer's one tool (activities/proposing.py): not a lane's tool, so not in TOOL_ARGS ---


class ProposedLaneArgs(_Args):
    """One lane of a proposal: its name, its goal for this task, what it may write and read, and its budgets."""

    name: str = Field(description="letters, digits, '_' and '-'; it becomes a branch name")
    goal: str = Field(min_length=1, description="what this lane does for the task (its round-1 goal)")
    allowed_paths: list[str] = Field(min_length=1, description="gitignore-style globs the lane may write")
    read_only_paths: list[str] = Field(default=[], description="globs it may also read")
    depends_on: list[str] = Field(default=[], description="lanes whose work it builds on (they run first)")
    token_budget: int | None = Field(default=None, gt=0, description="omit: sized from its files and goal")
    max_turns: int | None = Field(default=None, gt=0)
    model: str | None = Field(default=None, description="omit: the run's model")


class SubmitLanesArgs(_Args):
    """Submit the lanes for the task: each lane's slice and goal, the interface contract they share, a one-line
    summary, and any paths two lanes must both write (overlaps; keep it empty when the slices are disjoint)."""

    lanes: list[ProposedLaneArgs] = Field(min_length=1)
    interface_contract: str = Field(min_length=1)
    summary: str = ""
    overlaps: list[str] = []


def submit_lanes_spec() -> dict[str, Any]:
    """The proposer's tool, as offered to models."""
    schema = SubmitLanesArgs.model_json_schema()
    schema.pop("title", None)
    description = schema.pop("description", "")
    return {"name": "submit_lanes", "description": description, "parameters": schema}
