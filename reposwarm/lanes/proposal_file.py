"""A proposal of lanes as a file a person reads and edits: the lanes file it would be, plus its round-1 plan as a
`plan:` section (interface_contract, summary, a goal per lane). Pure (YAML and the contracts): the command line
writes and reads it, and the run's workflow reads a person's edit with the very same code.

`run --write-lanes FILE` writes the lanes file alone (it loads with `--lanes FILE`) and the plan beside it as
FILE's `.plan.yaml` (it loads with `--plan`); `run`'s edit and `confirm --lanes FILE` take the one file with its
`plan:` section, which is split off before the rest is read as a lanes file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from reposwarm.contracts import LanePlan, LaneProposal, LanesFile, Plan, SwarmConfig, ValidationConfig
from reposwarm.contracts.config import AcpAgent, CheckProfile, HelperRole, LanesFileOnDisk
from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.checking import check_lanes
from reposwarm.lanes.loading import config_problems

PLAN_KEY = "plan"
PROFILE = "default"  # the proposal's one validation profile, as the lanes file names it


def run_validation(base: LanesFile, profile: CheckProfile | None) -> ValidationConfig:
    """The validation a proposal's run uses: the configuration's own profiles when it has some (the profile it
    selects becomes the proposal's, the same one unless a person edited it), else the proposal's detected profile
    as PROFILE; never the detected one in place of a configured one."""
    if base.validation.profiles:
        if profile is None:
            return base.validation
        return base.validation.model_copy(update={"profiles": {**base.validation.profiles,
                                                               base.validation.profile: profile}})
    return ValidationConfig(profile=PROFILE, profiles={PROFILE: profile}) if profile is not None else ValidationConfig()


def configured_profile(base: LanesFile, test_profile: str | None = None) -> CheckProfile | None:
    """The profile the configuration selects (TEST_PROFILE's first), None when it has none."""
    profiles = base.validation.profiles
    return profiles.get(test_profile or "") or profiles.get(base.validation.profile)


def lanes_data(proposal: LaneProposal, base: LanesFile | None = None) -> dict[str, Any]:
    """The lanes file a proposal is: the configuration it was proposed in (swarm settings, profiles, prices,
    delivery, where not the defaults), with the proposal's lanes, its declared overlaps and its profile."""
    base = base or LanesFile(swarm=SwarmConfig())
    data: dict[str, Any] = base.model_dump(mode="json", exclude_defaults=True, exclude={"swarm", "validation"})
    swarm: dict[str, Any] = base.swarm.model_dump(mode="json", exclude_defaults=True, exclude={"lanes", "overlaps"})
    if proposal.overlaps:
        swarm["overlaps"] = list(proposal.overlaps)
    swarm["lanes"] = {name: {"allowed_paths": role.allowed_paths,
                             **role.model_dump(mode="json", exclude_defaults=True, exclude={"allowed_paths"})}
                      for name, role in proposal.lanes.items()}
    validation = run_validation(base, proposal.profile)
    out: dict[str, Any] = {"swarm": swarm}
    if validation.profiles:
        out["validation"] = {"profile": validation.profile, "profiles": {
            name: profile.model_dump(mode="json", exclude_defaults=True)
            for name, profile in validation.profiles.items()}}
    return {**out, **data}


def plan_data(plan: Plan | None) -> dict[str, Any]:
    if plan is None:
        return {}
    return {"interface_contract": plan.interface_contract, "summary": plan.summary,
            "lanes": [{"lane": lp.lane, "goal": lp.goal} for lp in plan.lanes]}


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110)


def proposal_text(proposal: LaneProposal, base: LanesFile | None = None, header: str = "") -> str:
    """The one file a person edits: the lanes file, then its `plan:` section."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    body = _dump({**lanes_data(proposal, base), PLAN_KEY: plan_data(proposal.plan)})
    return comments + body


def write_lanes(proposal: LaneProposal, path: Path, base: LanesFile | None = None) -> Path:
    """`--write-lanes FILE`: the lanes file alone, and its plan beside it (returned)."""
    path.write_text(_dump(lanes_data(proposal, base)), encoding="utf-8")
    plan_path = plan_path_of(path)
    plan_path.write_text(_dump(plan_data(proposal.plan)), encoding="utf-8")
    return plan_path


def plan_path_of(path: Path) -> Path:
    return path.with_name(f"{path.stem}.plan.yaml")


def read_text(text: str, where: str = "edited lanes") -> tuple[LanesFile, Plan | None]:
    """A person's edit: the lanes file (checked as the loader checks one) and its plan when it has a `plan:`
    section. A ConfigError lists every problem at once."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with a 'swarm' key, got {type(data).__name__}")
    data = dict(data)
    raw_plan = data.pop(PLAN_KEY, None)
    problems: list[str] = []
    config: LanesFile | None = None
    try:
        LanesFileOnDisk.model_validate(data)
        config = LanesFile.model_validate(data)
    except ValidationError as err:
        problems += config_problems(err.errors(include_url=False), LanesFileOnDisk)
    if config is not None:  # the lanes' own checks (graph, slices two lanes share...): pure, no files, no PATH
        problems += check_lanes(config, None, which=where, tools_on_path=False).errors
    plan = None
    if raw_plan:
        try:
            plan = Plan.model_validate(raw_plan)
        except ValidationError as err:
            problems += [f"{PLAN_KEY}.{p}" for p in config_problems(err.errors(include_url=False), Plan)]
    if problems or config is None:
        if len(problems) == 1:
            raise ConfigError(f"{where}: {problems[0]}")
        raise ConfigError(f"{where}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems))
    return config, plan


def edited(proposal: LaneProposal, config: LanesFile, plan: Plan | None) -> LaneProposal:
    """The proposal as a person edited it: their lanes, overlaps and profile; their plan, or else the proposal's
    goals for the lanes it still has (a new lane without one is asked to do its part of the task)."""
    if plan is None:
        goals = {lp.lane: lp.goal for lp in proposal.plan.lanes} if proposal.plan else {}
        contract = proposal.plan.interface_contract if proposal.plan else "As the task says."
        plan = Plan(interface_contract=contract, summary=proposal.plan.summary if proposal.plan else "",
                    lanes=[LanePlan(lane=name, goal=goals.get(name) or "Do this lane's part of the task, in its "
                                    "slice.") for name in config.swarm.lanes])
    profile = config.validation.profiles.get(config.validation.profile)
    return LaneProposal(lanes=dict(config.swarm.lanes), plan=plan, profile=profile,
                        overlaps=list(config.swarm.overlaps), attempts=proposal.attempts)


def accepted_config(base: LanesFile, proposal: LaneProposal) -> LanesFile:
    """The run's configuration once a proposal is accepted: the configuration it was proposed in (profiles,
    prices, delivery, swarm settings and budgets) with the proposal's lanes, overlaps and profile."""
    swarm: SwarmConfig = base.swarm.model_copy(update={"lanes": dict(proposal.lanes),
                                                       "overlaps": list(proposal.overlaps)})
    return base.model_copy(update={"swarm": swarm, "validation": run_validation(base, proposal.profile)})



COLUMNS = ("lane", "slice", "goal", "depends on", "agent", "model", "budget", "est. cost")
GOAL_CHARS = 70  # of a goal, in the table (the plan holds it whole)


def rows(proposal: LaneProposal, model: str = "") -> list[tuple[str, ...]]:
    """The proposal's table: a row per lane (COLUMNS)."""
    goals = {lp.lane: lp.goal for lp in proposal.plan.lanes} if proposal.plan else {}
    out: list[tuple[str, ...]] = []
    for name, role in proposal.lanes.items():
        goal = " ".join(goals.get(name, "").split())
        cost = proposal.estimated_cost_usd.get(name)
        tokens = proposal.estimated_tokens.get(name)
        estimate = f"${cost:.4f}" if cost is not None else (f"{tokens:,} tok" if tokens else "-")
        slice_ = ", ".join(role.allowed_paths) + (f" (reads {', '.join(role.read_only_paths)})"
                                                  if role.read_only_paths else "")
        out.append((name, slice_, goal[:GOAL_CHARS] + ("..." if len(goal) > GOAL_CHARS else ""),
                    ", ".join(role.depends_on) or "-", _agent_cell(role), role.model or model or "-",
                    f"{role.token_budget:,}", estimate))
    return out


def _agent_cell(role: HelperRole) -> str:
    """Who does the lane's work: builtin, claude-code, codex, or `acp: <command>`."""
    if isinstance(role.agent, AcpAgent):
        return f"acp: {' '.join(role.agent.acp)[:40]}"
    return role.agent


def notes(proposal: LaneProposal) -> list[str]:
    """What is said under the table: the contract, the checks, predicted overlaps, warnings, problems."""
    lines = []
    if proposal.plan is not None:
        lines.append(f"interface contract: {' '.join(proposal.plan.interface_contract.split())[:400]}")
        if proposal.plan.summary:
            lines.append(f"summary: {' '.join(proposal.plan.summary.split())[:200]}")
    checks = "; ".join(" ".join(argv) for argv in proposal.profile.commands) if proposal.profile else "none found"
    lines.append(f"checks: {checks}")
    if proposal.overlaps:
        lines.append(f"declared overlaps (their merges go to the converger): {', '.join(proposal.overlaps)}")
    lines += [f"predicted overlap: {o}" for o in proposal.predicted_overlaps]
    lines += [f"warning: {w}" for w in proposal.warnings]
    lines += [f"problem: {p}" for p in proposal.problems]
    if proposal.decided:
        lines.append(f"decided: {proposal.decided}")
    return lines


def render_proposal(proposal: LaneProposal, model: str = "") -> str:
    """The proposal as plain text (status, and `run` off a terminal)."""
    table = [COLUMNS, *rows(proposal, model)]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = [f"proposed lanes ({len(proposal.lanes)}; planner replies: {proposal.attempts}):"]
    lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join([*lines, *(f"  {n}" for n in notes(proposal))])
