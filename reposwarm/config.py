"""Loading and checking the lanes file, plan files and environment knobs.

Everything here runs in the starter, before any workflow starts, so a bad
config is one clear line naming the file, the key and why.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from reposwarm.agent.paths import PathPolicy
from reposwarm.contracts import LanesFile, Plan

# The reference design's environment knobs, read by the starter.
ENV_KNOBS = (
    "MAX_PARALLEL_HELPERS",
    "MAX_HELPER_LOOPS",
    "MAX_CONSECUTIVE_TEST_FAILS",
    "SWARM_BRANCH",
    "BASE_BRANCH",
    "TEST_PROFILE",
    "VALIDATION_TIMEOUT_S",
    "REPOSWARM_MODEL",
)


class ConfigError(Exception):
    """A configuration problem, phrased for the user."""


def _read_structured(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        where = ""
        mark = getattr(err, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        elif isinstance(err, json.JSONDecodeError):
            where = f" at line {err.lineno}, column {err.colno}"
        problem = getattr(err, "problem", None) or getattr(err, "msg", None) or str(err).splitlines()[0]
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ConfigError(f"{path}: not valid {kind}{where}: {problem}") from err


def _explain(path: Path, err: ValidationError) -> ConfigError:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {err.error_count() - 1} more problem(s))" if err.error_count() > 1 else ""
    return ConfigError(f"{path}: {key}: {first['msg']}{more}")


LANE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_lane_graph(lanes: dict[str, Any], where: str) -> list[str]:
    """Return lane names in a dependency order; raise on bad names, unknown lanes and cycles."""
    for name, role in lanes.items():
        if not LANE_NAME.fullmatch(name):
            # a lane's name becomes a branch (swarm/<run>/<lane>) and a folder of the worker's
            raise ConfigError(f"{where}: swarm.lanes: {name!r} is not a lane name (letters, digits, '_' and '-', "
                              "starting with a letter or digit, at most 64 characters)")
        for dep in role.depends_on:
            if dep not in lanes:
                raise ConfigError(f"{where}: swarm.lanes.{name}.depends_on: unknown lane {dep!r}")
            if dep == name:
                raise ConfigError(f"{where}: swarm.lanes.{name}.depends_on: a lane cannot depend on itself")
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, chain: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = chain[chain.index(name):] + [name]
            raise ConfigError(f"{where}: swarm.lanes: depends_on cycle: {' -> '.join(cycle)}")
        state[name] = "visiting"
        for dep in lanes[name].depends_on:
            visit(dep, chain + [name])
        state[name] = "done"
        order.append(name)

    for name in lanes:
        visit(name, [])
    return order


def load_lanes_file(path: str | Path) -> LanesFile:
    path = Path(path)
    data = _read_structured(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'swarm' key, got {type(data).__name__}")
    try:
        config = LanesFile.model_validate(data)
    except ValidationError as err:
        raise _explain(path, err) from err
    check_lane_graph(config.swarm.lanes, str(path))
    return config


def apply_env(config: LanesFile, env: dict[str, str] | None = None) -> LanesFile:
    """Apply the reference design's environment knobs over the lanes file."""
    env = dict(os.environ if env is None else env)
    swarm = config.swarm.model_copy()

    def integer(name: str) -> int | None:
        if name not in env:
            return None
        try:
            value = int(env[name])
        except ValueError:
            raise ConfigError(f"environment: {name}={env[name]!r} is not an integer") from None
        if value <= 0:
            raise ConfigError(f"environment: {name} must be positive, got {value}")
        return value

    if (v := integer("MAX_PARALLEL_HELPERS")) is not None:
        swarm.max_parallel = v
    if (v := integer("MAX_HELPER_LOOPS")) is not None:
        swarm.max_helper_loops = v
    if (v := integer("MAX_CONSECUTIVE_TEST_FAILS")) is not None:
        swarm.max_consecutive_test_fails = v
    validation = config.validation.model_copy()
    if "TEST_PROFILE" in env:
        if validation.profiles and env["TEST_PROFILE"] not in validation.profiles:
            raise ConfigError(
                f"environment: TEST_PROFILE={env['TEST_PROFILE']!r} is not a profile of the lanes file "
                f"({', '.join(sorted(validation.profiles))})"
            )
        validation.profile = env["TEST_PROFILE"]
    if "VALIDATION_TIMEOUT_S" in env:
        try:
            timeout = float(env["VALIDATION_TIMEOUT_S"])
        except ValueError:
            raise ConfigError(f"environment: VALIDATION_TIMEOUT_S={env['VALIDATION_TIMEOUT_S']!r} is not a number") from None
        if not math.isfinite(timeout) or timeout <= 0:
            raise ConfigError(f"environment: VALIDATION_TIMEOUT_S must be a positive number of seconds, got {timeout}")
        # the default for profiles that set no timeout of their own
        validation.profiles = {
            name: profile if "timeout_s" in profile.model_fields_set else profile.model_copy(update={"timeout_s": timeout})
            for name, profile in validation.profiles.items()
        }
    return config.model_copy(update={"swarm": swarm, "validation": validation})


def load_plan_file(path: str | Path, config: LanesFile) -> Plan:
    path = Path(path)
    data = _read_structured(path)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as err:
        raise _explain(path, err) from err
    check_plan(plan, config, str(path))
    return plan


def within(pattern: str, allowed: list[str], read_only: list[str]) -> bool:
    """A narrower slice is acceptable when the fixed part of its pattern is writable for the lane."""
    if pattern in allowed:
        return True
    fixed = re.split(r"[*?\[]", pattern.strip().removeprefix("./"), maxsplit=1)[0].rstrip("/")
    return bool(fixed) and PathPolicy(".", allowed, read_only).writable(fixed + ("/x" if pattern != fixed else ""))


def check_plan(plan: Plan, config: LanesFile, where: str) -> None:
    """A plan may only assign goals to lanes the lanes file defines."""
    for i, lane in enumerate(plan.lanes):
        if lane.lane not in config.swarm.lanes:
            raise ConfigError(
                f"{where}: lanes.{i}.lane: unknown lane {lane.lane!r} "
                f"(the lanes file defines {', '.join(sorted(config.swarm.lanes))})"
            )
        role = config.swarm.lanes[lane.lane]
        for pattern in lane.allowed_paths or []:
            if not within(pattern, role.allowed_paths, role.read_only_paths):
                raise ConfigError(
                    f"{where}: lanes.{i}.allowed_paths: {pattern!r} is not within lane {lane.lane!r}'s "
                    f"allowed paths ({', '.join(role.allowed_paths)})"
                )
    planned = {lane.lane for lane in plan.lanes}
    for lane in plan.lanes:
        for dep in config.swarm.lanes[lane.lane].depends_on:
            if dep not in planned:
                raise ConfigError(f"{where}: lane {lane.lane!r} depends on {dep!r}, which the plan leaves out")
