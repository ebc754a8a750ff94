"""Loading and checking the lanes file, plan files and environment knobs.

Everything here runs in the starter, before any workflow starts, so a bad
config is said clearly: the file, then each problem with its key and why (on
one line when there is only one).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from reposwarm.agent import slices
from reposwarm.contracts import LanesFile, Plan
from reposwarm.contracts.config import LanesFileOnDisk

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


Loc = tuple[int | str, ...]


def _as_model(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation stands for; `X | None` is X, as pydantic puts no step for the None in a location."""
    if get_origin(annotation) in (Union, UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        annotation = options[0] if len(options) == 1 else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model whose keys belong at `loc`, so an unknown key there can be compared with the real ones.

    A field leads to its type; a list index or a dict key (swarm.lanes.<name>) to the item's type.
    """
    annotation: Any = root
    for part in loc:
        if get_origin(annotation) in (list, dict):
            annotation = get_args(annotation)[-1]
            continue
        model = _as_model(annotation)
        field = model.model_fields.get(str(part)) if model is not None else None
        if field is None:
            return None
        annotation = field.annotation
    return _as_model(annotation)


def _where(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def _guess(key: str, missing: list[str], known: list[str]) -> str | None:
    """The key a misspelt one was meant to be: a missing required key first, else any key of the model."""
    for candidates in (missing, known):
        if close := difflib.get_close_matches(key, candidates, n=1):
            return close[0]
    return None


def _unknown_key(loc: Loc, root: type[BaseModel], missing: list[str]) -> tuple[str, str | None]:
    """The line for an unknown key, and the key it was probably meant to be."""
    key = str(loc[-1])
    model = _model_at(root, loc[:-1])
    known = list(model.model_fields) if model is not None else []
    guess = _guess(key, missing, known)
    if guess is not None:
        return f"unknown key {key!r} (did you mean {guess!r}?)", guess
    if known:
        return f"unknown key {key!r} (known keys: {', '.join(known)})", None
    return f"unknown key {key!r}", None


def _problems(errors: list[ErrorDetails], root: type[BaseModel]) -> list[str]:
    """One line per problem. A misspelt required key is one problem, not two: its "missing" line goes,
    as the did-you-mean on the unknown key says it."""
    missing: dict[Loc, list[str]] = {}
    for e in errors:
        if e["type"] == "missing" and e["loc"]:
            missing.setdefault(e["loc"][:-1], []).append(str(e["loc"][-1]))
    lines: dict[int, str] = {}
    explained: set[Loc] = set()
    for i, e in enumerate(errors):
        if e["type"] == "extra_forbidden" and e["loc"]:
            parent = e["loc"][:-1]
            line, guess = _unknown_key(e["loc"], root, missing.get(parent, []))
            if guess in missing.get(parent, []):
                explained.add((*parent, guess))
            lines[i] = f"{_where(e['loc'])}: {line}"
    for i, e in enumerate(errors):
        if i in lines or (e["type"] == "missing" and e["loc"] in explained):
            continue
        msg = e["msg"].removeprefix("Value error, ") if e["type"] == "value_error" else e["msg"]
        lines[i] = f"{_where(e['loc'])}: {msg}"
    return [lines[i] for i in sorted(lines)]


def _explain(path: Path, err: ValidationError, root: type[BaseModel]) -> ConfigError:
    """Every problem at once, so the file is fixed in one pass; a single problem stays one line."""
    problems = _problems(err.errors(include_url=False), root)
    if len(problems) == 1:
        return ConfigError(f"{path}: {problems[0]}")
    return ConfigError(f"{path}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems))


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
        LanesFileOnDisk.model_validate(data)  # a file has lanes (a run's request may not, while it proposes some)
        config = LanesFile.model_validate(data)
    except ValidationError as err:
        raise _explain(path, err, LanesFileOnDisk) from err
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


def load_plan_file(path: str | Path, config: LanesFile | None) -> Plan:
    """A plan file, checked; against the lanes file's lanes when one is given (else the run checks them)."""
    path = Path(path)
    data = _read_structured(path)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as err:
        raise _explain(path, err, Plan) from err
    if config is not None:
        check_plan(plan, config, str(path))
    return plan


def within(pattern: str, allowed: list[str], read_only: list[str]) -> bool:
    """Whether every path `pattern` matches is writable for the lane (reposwarm/agent/slices.py decides)."""
    return slices.within(pattern, allowed, read_only)


def check_plan(plan: Plan, config: LanesFile, where: str) -> None:
    """A plan may only assign goals to lanes the lanes file defines, and only narrow their slices."""
    for i, lane in enumerate(plan.lanes):
        if lane.lane not in config.swarm.lanes:
            raise ConfigError(
                f"{where}: lanes.{i}.lane: unknown lane {lane.lane!r} "
                f"(the lanes file defines {', '.join(sorted(config.swarm.lanes))})"
            )
        if (why := slices.plan_lane_problem(lane, config.swarm.lanes[lane.lane])) is not None:
            raise ConfigError(f"{where}: lanes.{i}.allowed_paths: {why}")
    planned = {lane.lane for lane in plan.lanes}
    for lane in plan.lanes:
        for dep in config.swarm.lanes[lane.lane].depends_on:
            if dep not in planned:
                raise ConfigError(f"{where}: lane {lane.lane!r} depends on {dep!r}, which the plan leaves out")
