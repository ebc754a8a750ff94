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
from collections.abc import Collection
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from reposwarm.contracts import LanesFile, Plan
from reposwarm.contracts.config import HelperRole, LanesFileOnDisk, SwarmConfig
from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.checking import LANE_NAME as LANE_NAME
from reposwarm.lanes.checking import LaneFindings, check_lanes, dependency_order, lane_graph_problems
from reposwarm.slices import narrowing as slices

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


def config_problems(errors: list[ErrorDetails], root: type[BaseModel]) -> list[str]:
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
    problems = config_problems(err.errors(include_url=False), root)
    if len(problems) == 1:
        return ConfigError(f"{path}: {problems[0]}")
    return ConfigError(f"{path}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems))


def _many(where: str | Path, problems: list[str]) -> ConfigError:
    """One problem on one line; more, each on its own (the file is fixed in one pass)."""
    if len(problems) == 1:
        return ConfigError(f"{where}: {problems[0]}")
    return ConfigError(f"{where}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems))


def check_lane_graph(lanes: dict[str, Any], where: str) -> list[str]:
    """Return lane names in a dependency order; raise on bad names, unknown lanes and cycles (all of them)."""
    if problems := lane_graph_problems(lanes):
        raise _many(where, problems)
    return dependency_order(lanes)


def _lanes_read_so_far(data: dict[str, Any]) -> LanesFile | None:
    """The slices of a file whose other keys are wrong, of the lanes whose slices are right (and swarm.overlaps, if
    it is), so what the slices say is listed with the schema's problems."""
    swarm = data.get("swarm")
    lanes = swarm.get("lanes") if isinstance(swarm, dict) else None
    if not isinstance(lanes, dict):
        return None
    roles = {}
    for name, role in lanes.items():
        if not isinstance(role, dict):
            continue
        try:  # (only its slice: a lane whose budget is wrong still writes where it says)
            roles[name] = HelperRole.model_validate({k: v for k, v in role.items()
                                                     if k in ("allowed_paths", "read_only_paths")})
        except ValidationError:
            continue
    overlaps = swarm.get("overlaps", []) if isinstance(swarm, dict) else []
    try:
        return LanesFile(swarm=SwarmConfig(lanes=roles, overlaps=overlaps))
    except ValidationError:
        return LanesFile(swarm=SwarmConfig(lanes=roles))


def read_lanes_file(path: str | Path, files: Collection[str] | None = None, *, root: Path | None = None,
                    at: str = "", tools_on_path: bool = False, need_lanes: bool = True) -> tuple[LanesFile, LaneFindings]:
    """A lanes file and what reposwarm/lanes/checking.py says of it: every error at once, in one ConfigError (the
    schema's, the lane graph's, the slices'), or the file with the warnings and notes to say. `files`: the
    tracked files of the commit the run starts from (`at` names it), for the warnings about slices matching none;
    `tools_on_path`: warn of check commands not installed here; `need_lanes=False`: the repository's
    configuration, whose lanes may be absent (read_configuration)."""
    path = Path(path)
    data = _read_structured(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'swarm' key, got {type(data).__name__}")
    schema = LanesFileOnDisk if need_lanes else LanesFile
    if not need_lanes and data.get("swarm") is None:
        data = {**data, "swarm": {}}  # (the repository's configuration may hold no swarm settings at all)
    try:
        schema.model_validate(data)  # a lanes file has lanes (a run's request may not, while it proposes some)
        config = LanesFile.model_validate(data)
    except ValidationError as err:
        problems = config_problems(err.errors(include_url=False), schema)
        swarm = data.get("swarm")
        problems += lane_graph_problems(swarm.get("lanes") if isinstance(swarm, dict) else None)
        if (partial := _lanes_read_so_far(data)) is not None:
            problems += check_lanes(partial, files, tools_on_path=False, graph=False).errors
        raise _many(path, list(dict.fromkeys(problems))) from err
    findings = check_lanes(config, files, root=root, at=at, tools_on_path=tools_on_path)
    if findings.errors:
        raise _many(path, findings.errors)
    return config, findings


def read_configuration(path: str | Path, files: Collection[str] | None = None, *, root: Path | None = None,
                       at: str = "", tools_on_path: bool = False) -> tuple[LanesFile, LaneFindings]:
    """The repository's configuration: a lanes file whose `swarm.lanes` may be absent or empty (its check
    profiles, prices, delivery, swarm defaults and budgets, committed once; the run proposes its lanes per task).
    Checked as a lanes file is, every problem in one ConfigError; with lanes, it is a lanes file."""
    return read_lanes_file(path, files, root=root, at=at, tools_on_path=tools_on_path, need_lanes=False)


def declares_lanes(path: str | Path) -> bool:
    """Whether a configuration file has lanes (a non-empty `swarm.lanes`): then it is a lanes file, else the
    run proposes its lanes. A file that does not read as a mapping counts as one with lanes, so the lanes
    loader says what is wrong with it."""
    try:
        data = _read_structured(Path(path))
    except ConfigError:
        return True
    swarm = data.get("swarm") if isinstance(data, dict) else None
    return not isinstance(data, dict) or (isinstance(swarm, dict) and bool(swarm.get("lanes")))


def load_lanes_file(path: str | Path) -> LanesFile:
    """A lanes file, checked (read_lanes_file: every problem in one ConfigError)."""
    return read_lanes_file(path)[0]


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
    """Whether every path `pattern` matches is writable for the lane (reposwarm/slices/narrowing.py decides)."""
    return slices.within(pattern, allowed, read_only)


def check_plan(plan: Plan, config: LanesFile, where: str) -> None:
    """A plan may only assign goals to lanes the lanes file defines, and only narrow their slices: every problem
    at once, in one ConfigError."""
    problems = []
    for i, lane in enumerate(plan.lanes):
        if lane.lane not in config.swarm.lanes:
            problems.append(f"lanes.{i}.lane: unknown lane {lane.lane!r} "
                            f"(the lanes file defines {', '.join(sorted(config.swarm.lanes))})")
        elif (why := slices.plan_lane_problem(lane, config.swarm.lanes[lane.lane])) is not None:
            problems.append(f"lanes.{i}.allowed_paths: {why}")
    planned = {lane.lane for lane in plan.lanes}
    for lane in plan.lanes:
        for dep in config.swarm.lanes[lane.lane].depends_on if lane.lane in config.swarm.lanes else []:
            if dep not in planned:
                problems.append(f"lane {lane.lane!r} depends on {dep!r}, which the plan leaves out")
    if problems:
        raise _many(where, list(dict.fromkeys(problems)))
