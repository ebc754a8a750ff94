"""The configuration: the lanes file (in the reference design's helpers.yaml shape), checks, prices, delivery."""

from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from reposwarm.contracts.base import Contract
from reposwarm.contracts.cost import ModelPrice
from reposwarm.gitvalues import remote_problem

# The agents a lane may name (issue 47): reposwarm's own loop, or a coding CLI run in the lane's sandbox
# (reposwarm/agents/, docs/agents.md). An agent that speaks the Agent Client Protocol is named by its command.
AGENT_NAMES = ("builtin", "claude-code", "codex")


class AcpAgent(Contract):
    """`agent: {acp: [command, args...]}`: an agent speaking the Agent Client Protocol, run by its command."""

    acp: list[str] = Field(min_length=1, description="the agent's command and its arguments (an argv, no shell)")

    @field_validator("acp")
    @classmethod
    def _argv(cls, argv: list[str]) -> list[str]:
        if not all(isinstance(a, str) and a and "\x00" not in a for a in argv):
            raise ValueError("acp: the agent's command is a list of non-empty strings (an argv, no shell)")
        return argv


class HelperRole(Contract):
    """One lane of the lanes file: what a lane may touch and spend."""

    # "Helper" only in the reference design's contract names (HelperRole, HelperTask), kept for compatibility.
    model: str | None = Field(default=None, description="this lane's model (`provider:name`); null: the run's")
    agent: AcpAgent | Literal["builtin", "claude-code", "codex"] = Field(
        default="builtin", description="who does the lane's work: `builtin` (reposwarm's own loop), `claude-code`, "
                                       "`codex`, or `{acp: [command, args...]}` (docs/agents.md)")

    @field_validator("agent", mode="before")
    @classmethod
    def _known_agent(cls, value: object) -> object:
        # One clear line for a wrong value, not pydantic's line per member of the union.
        if isinstance(value, str) and value in AGENT_NAMES:
            return value
        if isinstance(value, AcpAgent):
            return value
        if isinstance(value, dict) and set(value) == {"acp"}:
            argv = value["acp"]
            if isinstance(argv, list) and argv and all(isinstance(a, str) and a for a in argv):
                return value
            raise ValueError(f"acp: {argv!r} is not a command: a list of non-empty strings, [command, args...]")
        shown = repr(value)[:80]
        raise ValueError(f"{shown} is not an agent: one of {', '.join(AGENT_NAMES)}, or {{acp: [command, args...]}}")

    @property
    def agent_name(self) -> str:
        """The lane's agent in one word: builtin, claude-code, codex or acp."""
        return self.agent if isinstance(self.agent, str) else "acp"
    allowed_paths: list[str] = Field(min_length=1, description="what the lane may write: gitignore-style globs from "
                                                               "the repository root")
    read_only_paths: list[str] = Field(default=[], description="what it may also read, never write")
    # billed input-token equivalents (reposwarm/contracts/cost.py): a cache read counts 0.1 with Anthropic
    token_budget: int = Field(default=64_000, gt=0, description="billed input-token equivalents before the lane "
                                                                "pauses and asks (docs/cost.md)")
    cost_budget_usd: float | None = Field(default=None, gt=0, description="dollars before the lane pauses and asks; "
                                                                          "needs its model's price")
    max_turns: int = Field(default=40, gt=0, description="model turns before the lane ends")
    max_wall_s: float = Field(default=6 * 3600, gt=0, description="seconds of wall time before the lane ends")
    max_malformed_replies: int = Field(default=3, gt=0, description="replies in a row with no usable tool call "
                                                                    "before the lane fails")
    context_tokens: int = Field(default=100_000, ge=2_000, description="the transcript is compacted as it nears "
                                                                       "this many tokens")
    depends_on: list[str] = Field(default=[], description="lanes whose merged work this lane starts from (they run "
                                                          "first)")
    # The model's replies (reposwarm/models/limits.py): their limit in tokens (default: what the model allows on
    # Anthropic; none sent to OpenAI), Anthropic's extended thinking budget, an OpenAI reasoning model's effort.
    max_output_tokens: int | None = Field(default=None, gt=0, description="a reply's limit in tokens; null: the "
                                          "model's on Anthropic (REPOSWARM_MAX_OUTPUT_TOKENS), none sent to OpenAI")
    thinking_tokens: int | None = Field(default=None, ge=1_024, description="Anthropic's extended thinking budget, "
                                                                            "below max_output_tokens")
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        default=None, description="an OpenAI reasoning model's effort")

    @model_validator(mode="after")
    def _thinking_fits(self) -> HelperRole:
        if self.thinking_tokens is not None and self.max_output_tokens is not None \
                and self.thinking_tokens >= self.max_output_tokens:
            raise ValueError(f"thinking_tokens ({self.thinking_tokens}) must be below max_output_tokens "
                             f"({self.max_output_tokens}): the thinking counts in the reply's limit")
        return self
    # The `run` tool (a command in the checks' sandbox, reposwarm/agent/shell.py); null: on when the sandbox is on,
    # off when the worker runs with REPOSWARM_SANDBOX=off. Offered to every lane either way (byte-identical tool
    # specs, for prompt caching); refused at call time when off.
    shell: bool | None = Field(default=None, description="the `run` tool: on, off, or null: on when checks are "
                                                         "sandboxed (only your own file may say true)")


# The lock files that key the setup cache by default: a change to any of them runs the setup step again.
LOCK_FILES = ("package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "yarn.lock", "bun.lockb",
              "poetry.lock", "uv.lock", "Pipfile.lock", "requirements.txt", "go.sum", "Cargo.lock",
              "Gemfile.lock", "composer.lock")


class CommandRule(Contract):
    """What a command of a profile says besides its argv (a mapping entry of `commands`: run, when, shards)."""

    # Globs (as a lane's slice takes them): the command runs only when the changes touch one; [] always runs.
    when: list[str] = Field(default=[], description="globs: the command runs only when the changes touch one; "
                                                   "[]: always")
    shards: int = Field(default=1, gt=0, le=64, description="its tests split over this many activities, on any "
                                                            "worker host")


class CheckProfile(Contract):
    """A validation profile: argv lists run in the sandbox (reposwarm/checks/sandbox.py), with its limits."""

    commands: list[list[str]] = Field(min_length=1, description="argv lists run from the repository root in the "
                                      "sandbox, no shell; an entry may be a mapping {run: argv, when, shards}")
    # Per command (" ".join(argv)): its `when:` and `shards:` (reposwarm/checks/selection/plans.py); absent: runs always, whole.
    rules: dict[str, CommandRule] = Field(default={}, description="each command's `when` and `shards`, by its "
                                          "command line: what a `commands` mapping entry becomes (write them there)")
    # The tests a change can affect (reposwarm/checks/selection/affected.py): "affected" runs only those where that can be
    # told soundly (else the whole command, saying why); "all" runs every test every time.
    selection: Literal["affected", "all"] = Field(default="affected", description="`affected`: only the tests a "
                                                  "change can affect, where that is sound; `all`: every test every time")
    # Who tells which tests a change affects: reposwarm's import graph, or the repository's own build tool.
    selector: Literal["graph", "bazel", "nx", "turbo", "pants", "go"] = Field(
        default="graph", description="who tells which tests a change affects: reposwarm's import graph, or the "
                                     "repository's own build tool (docs/scale.md)")
    # When the tests a selected check did not run, run: once before the review, before delivery, or never.
    full_at: Literal["review", "delivery", "never"] = Field(default="review", description="when the tests a "
                                                            "selected check left out run: before the review, before "
                                                            "delivery, or never")
    timeout_s: float = Field(default=600, gt=0, description="seconds per command; VALIDATION_TIMEOUT_S is the "
                                                            "default of a profile that sets none")
    # What the sandboxed commands may see and use; everything else is denied.
    env: dict[str, str] = Field(default={}, description="variables the commands see, besides PATH, HOME "
                                                       "(private), locale, CI=true and REPOSWARM_CHECK_ENV_PASS's")
    network: bool = Field(default=False, description="give the commands the network")
    # address space per process (RLIMIT_AS), not memory in use: vitest 3 (WebAssembly) reserves ~24 GiB at start
    memory_mb: int = Field(default=32768, gt=0, description="address space per process (RLIMIT_AS), in MB")
    max_processes: int = Field(default=256, gt=0, description="processes in the sandbox at once")
    max_file_mb: int = Field(default=512, gt=0, description="the largest file a command may write (RLIMIT_FSIZE), "
                                                            "in MB")
    max_output_mb: int = Field(default=16, gt=0, description="output kept per command, in MB; more ends the command")
    tmp_mb: int = Field(default=1024, gt=0, description="size of the private /tmp, HOME and /dev/shm, each "
                                                        "(memory-backed), in MB")
    max_tree_mb: int = Field(default=1024, gt=0, description="what a command may add to its tree, in MB; past it, "
                                                             "it is ended")
    read_only_paths: list[str] = Field(default=[], description="host folders (absolute) the commands may read "
                                       "besides the system's, the toolchains and their tree")
    # The setup step (reposwarm/checks/setup.py): argv lists run in the sandbox, in the checked tree, before the
    # checks, with network unless setup_network is false; the ignored folders they make (node_modules, .venv,
    # vendor) are cached on the worker host, keyed by these files' contents, and bound read-only into every
    # checked tree of the repository whose key files are the same, with no setup and no network.
    setup: list[list[str]] = Field(default=[], description="argv lists run before the checks, once per contents "
                                   "of the cache_key files; the folders they make are cached and bound read-only")
    cache_key: list[str] = Field(default=list(LOCK_FILES), description="paths or globs in the tree whose contents "
                                 "key the setup cache (missing ones count as missing)")
    setup_network: bool = Field(default=True, description="give the setup step the network")
    setup_timeout_s: float = Field(default=1800, gt=0, description="seconds for the setup step")
    deps_from_checkout: list[str] = Field(default=[], description="without a setup step: ignored folders of your "
                                          "own checkout (node_modules, .venv) bound read-only into the checked trees")
    # The language caches (GOCACHE, GOMODCACHE, cargo's target and registry, npm's, pip's) kept per worker host
    # and repository (reposwarm/checks/sandbox/caches.py).
    caches: bool = Field(default=True, description="keep the language caches (GOCACHE, cargo's target, npm's, "
                                                   "pip's) per worker host and repository")
    # Proof that the checks ran the change (reposwarm/checks/evidence/): a changed source file no command loaded
    # fails the gate when true; when false (the default) it is listed as "not exercised" and counted in the verdict.
    require_exercised: bool = Field(default=False, description="fail the gate when a changed source file was "
                                    "loaded by no check (false: it is listed as not exercised)")

    @field_validator("cache_key", "deps_from_checkout")
    @classmethod
    def _tree_paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            norm = posixpath.normpath(path) if isinstance(path, str) and path else ""
            if not norm or norm.startswith(("/", "../")) or norm in (".", "..", ".git") or "\x00" in path \
                    or norm.split("/")[0] == ".git":
                raise ValueError(f"{path!r} is not a path inside the repository (like node_modules or "
                                 "package-lock.json)")
        return [posixpath.normpath(p) for p in paths]

    @model_validator(mode="before")
    @classmethod
    def _command_entries(cls, data: object) -> object:
        """`commands:` entries may be mappings ({run: [...], when: [...], shards: N}): their argv in `commands`,
        the rest in `rules`, keyed by the command line."""
        if not isinstance(data, dict) or not isinstance(data.get("commands"), list):
            return data
        commands: list[object] = []
        rules = dict(data.get("rules") or {})
        for entry in data["commands"]:
            if isinstance(entry, dict):
                unknown = sorted(set(entry) - {"run", "when", "shards"})
                if unknown or not isinstance(entry.get("run"), list):
                    raise ValueError("a command is an argv list, or a mapping with `run:` (the argv list) and "
                                     "optionally `when:` (globs) and `shards:` (a count)"
                                     + (f"; unknown key(s): {', '.join(map(str, unknown))}" if unknown else ""))
                commands.append(entry["run"])
                if all(isinstance(a, str) for a in entry["run"]):
                    rules[" ".join(entry["run"])] = {k: v for k, v in entry.items() if k != "run"}
            else:
                commands.append(entry)
        return {**data, "commands": commands, "rules": rules}

    def rule(self, argv: list[str]) -> CommandRule:
        return self.rules.get(" ".join(argv)) or CommandRule()

    @model_validator(mode="after")
    def _rules_name_commands(self) -> CheckProfile:
        lines = {" ".join(argv) for argv in self.commands}
        if stray := sorted(set(self.rules) - lines):
            raise ValueError(f"rules for commands the profile does not run: {', '.join(map(repr, stray))}")
        return self

    @field_validator("commands", "setup")
    @classmethod
    def _argv_lists(cls, commands: list[list[str]], info: ValidationInfo) -> list[list[str]]:
        for argv in commands:
            if not argv or not all(isinstance(a, str) and a for a in argv):
                what = "setup command" if info.field_name == "setup" else "command"
                raise ValueError(f"each {what} is a non-empty list of non-empty strings (an argv, no shell)")
        return commands

    @field_validator("read_only_paths")
    @classmethod
    def _absolute_paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            # (bwrap takes it as an argument: no NUL, no option; and "/" would show the whole host again)
            if (not isinstance(path, str) or not path.startswith("/") or "\x00" in path
                    or posixpath.normpath(path) in ("/", "//")):
                raise ValueError(f"read_only_paths: {path!r} is not an absolute path below / (like /opt/sdk)")
        return [posixpath.normpath(p) for p in paths]


class ValidationConfig(Contract):
    profile: str = Field(default="default", description="the check profile runs use (TEST_PROFILE overrides); "
                                                        "with no profiles, the one detected from the repository")
    profiles: dict[str, CheckProfile] = Field(default={}, description="check profiles by name")

    @model_validator(mode="after")
    def _profile_exists(self) -> ValidationConfig:
        if self.profiles and self.profile not in self.profiles:
            raise ValueError(f"profile {self.profile!r} is not one of {sorted(self.profiles)}")
        return self


class SwarmConfig(Contract):
    max_parallel: int = Field(default=4, gt=0, description="lanes running at once (MAX_PARALLEL_HELPERS overrides)")
    # Dispatches per lane and run: the reference design's MAX_HELPER_LOOPS, a key of the lanes file.
    max_helper_loops: int = Field(default=3, gt=0, description="dispatches per lane and run: the first, repairs, "
                                                               "redone conflicts (MAX_HELPER_LOOPS overrides)")
    max_consecutive_test_fails: int = Field(default=3, gt=0, description="red checks in a row before the merged "
                                            "tree rolls back to its last green state (MAX_CONSECUTIVE_TEST_FAILS)")
    max_review_rounds: int = Field(default=5, gt=0, description="rounds (plan, lanes, checks, review) a run may have")
    review_timeout_s: float | None = Field(default=None, gt=0, description="how long a review waits; then the run "
                                           "ends as expired, branches kept; null: for ever")
    # a lane's host gone this long: rebuild it elsewhere; a lane's workflow ended without answering its run (terminated,
    # say): noticed within this long, and the lane ends failed
    host_timeout_s: float = Field(default=60, gt=0, description="seconds a lane's host may be gone before its "
                                                                "lane is rebuilt elsewhere")
    # Lane worktrees check out only the lane's folders (cone mode, sparse index); None: when the repo is big.
    sparse: bool | None = Field(default=None, description="lane worktrees check out only the lane's folders; null: "
                                                          "when the repository has over 2,000 files")
    on_red: Literal["review", "fail"] = Field(default="review", description="after a rollback: go to review with "
                                                                            "the report, or fail")
    # A model provider that does not answer (timeouts, refused connections, 429, 5xx) is retried with capped
    # backoff this long before a lane gives up: provider incidents last minutes to an hour.
    model_outage_s: float = Field(default=1800, gt=0, description="seconds a model provider that does not answer "
                                                                  "is retried before a lane gives up")
    # The run follows its base branch as the team keeps merging: before each review and delivery, the branch's new
    # commits are merged into the integration branch and checked. true keeps the commit the run started from.
    pin_base: bool = Field(default=False, description="keep the commit the run started from as the base branch "
                                                      "moves (run --pin-base)")
    # A lane is one workflow for the whole run: a repair and the next round's goal reach it as its next assignment,
    # and it goes on with its conversation, its worktree and its branch. false: a fresh lane per dispatch.
    warm_lanes: bool = Field(default=True, description="a lane is one workflow for the run: repairs and next "
                                                       "rounds go on in it, warm")
    model: str | None = Field(default=None, description="the run's model (`provider:name`) when neither --model "
                                                        "nor REPOSWARM_MODEL names one")
    # A lanes file has at least one lane (the loader reads it as LanesFileOnDisk, which says so); a run with no
    # lanes file starts with none and gets the lanes a person accepts (SwarmRequest.propose).
    lanes: dict[str, HelperRole] = Field(default={}, description="the lanes by name: at least one in a lanes "
                                         "file; none in a configuration without lanes (the run proposes them)")
    # Paths two lanes may both write (gitignore-style globs, as allowed_paths): lanes whose writable slices meet
    # only inside these are accepted, and their merges there go to the converger; anywhere else they must not meet.
    overlaps: list[str] = Field(default=[], description="paths two lanes may both write (globs); their merges "
                                                       "there go to the converger")
    # Prompt caching (reposwarm/models/anthropic.py, openai.py): how long the provider keeps a cached prefix.
    # "1h" where a lane or the planner waits longer than 5 minutes between calls (long checks, a slow review);
    # its writes cost 2x the input price against 1.25x.
    cache_ttl: Literal["5m", "1h"] = Field(default="5m", description="how long the provider keeps a cached "
                                           "prompt prefix: `1h` where calls are over 5 minutes apart")
    cost_budget_usd: float | None = Field(default=None, gt=0, description="dollars for the whole run before it "
                                                                          "pauses and asks; needs prices")
    # A lane (or the run) at its budget pauses with its work committed and waits this long for a person to
    # raise it or stop it (`reposwarm budget`); then it ends as budget_exhausted. 0: end at once.
    budget_wait_s: float = Field(default=3600, ge=0, description="how long a lane or run at its budget waits for "
                                                                 "`reposwarm budget`; then it ends (0: at once)")


class DeliveryConfig(Contract):
    """Where the approved branch goes besides the target repository."""

    remote: str | None = Field(default=None, description="push the delivered branch to this git remote (a name "
                                                         "or a URL with no credential)")
    pull_request: bool = Field(default=False, description="open a pull request (GitHub REST API; GITHUB_TOKEN in the "
                                                          "worker's environment)")
    github_repo: str | None = Field(default=None, pattern=r"^[\w.-]+/[\w.-]+$", description="the pull request's "
                                    "repository, owner/name; null: from the remote's URL")
    draft: bool = Field(default=False, description="open the pull request as a draft")

    @field_validator("github_repo")
    @classmethod
    def _owner_and_name(cls, repo: str | None) -> str | None:
        if repo is not None and any(part in (".", "..") for part in repo.split("/")):
            raise ValueError(f"{repo!r} is not owner/name")  # (it becomes a path of the GitHub API)
        return repo

    @field_validator("remote")
    @classmethod
    def _remote_is_data(cls, remote: str | None) -> str | None:
        # it reaches `git push` and `git remote get-url`: a name or an address, never an option
        if remote is not None and (why := remote_problem(remote)) is not None:
            raise ValueError(f"the remote {why}")  # (not echoed: it may hold a credential)
        return remote


class LanesFile(Contract):
    swarm: SwarmConfig = Field(description="the lanes, the swarm's limits and budgets (may be absent in a "
                                           "configuration without lanes)")
    validation: ValidationConfig = Field(default=ValidationConfig(), description="the checks")
    prices: dict[str, ModelPrice] = Field(default={}, description="$ per million tokens, by model name "
                                          "(`anthropic:claude-sonnet-4-5`, `openai:gpt-4.1`)")
    delivery: DeliveryConfig = Field(default=DeliveryConfig(), description="where the approved branch goes besides "
                                                                           "your repository")


class _SwarmConfigOnDisk(SwarmConfig):
    lanes: dict[str, HelperRole] = Field(min_length=1)


class LanesFileOnDisk(LanesFile):
    """A lanes file as the loader reads it (reposwarm/lanes/loading.py): the same keys, and at least one lane."""

    swarm: _SwarmConfigOnDisk
