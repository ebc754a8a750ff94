"""Slices only narrow (issue 30.3): reposwarm/slices/narrowing.py held against PathPolicy itself.

The properties are the promise: whenever `within` says yes, no path the pattern matches is outside what the
lane may write; whenever a narrowed list is accepted, the narrowed lane can write nothing its role could not;
and every witness the check names is a real path that proves the refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reposwarm.contracts import HelperRole, LanePlan, Plan
from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.loading import load_lanes_file, load_plan_file
from reposwarm.slices.narrowing import (
    MAX_PATTERNS,
    Undecided,
    escape,
    narrowing_problem,
    pattern_problem,
    plan_problem,
    within,
)
from reposwarm.slices.policy import PathPolicy

CHARS = "abdx.-"
NAME = st.text(CHARS, min_size=1, max_size=4).filter(lambda n: n not in (".", ".."))
GLOB_PART = st.one_of(
    NAME,
    st.just("*"), st.just("?"), st.just("[ab]"), st.just("[!a]"), st.just("[a-d]"),
    st.builds(lambda a, b: a + "*" + b, st.text(CHARS, max_size=2), st.text(CHARS, max_size=2)),
    st.builds(lambda a: a + "?", st.text(CHARS, max_size=2)),
)
COMPONENT = st.one_of(GLOB_PART, GLOB_PART, GLOB_PART, st.just("**"))


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(COMPONENT, min_size=1, max_size=4))
    text = "/".join(parts)
    if draw(st.booleans()) and not text.endswith("**"):
        text += "/"
    if draw(st.integers(0, 9)) == 0:
        text = "/" + text
    return text


@st.composite
def slice_lists(draw: st.DrawFn, negations: bool = True) -> list[str]:
    items = draw(st.lists(patterns(), min_size=1, max_size=3))
    if negations and draw(st.booleans()):
        items.append("!" + draw(patterns()))
    return items


def _instance(draw: st.DrawFn, pattern: str) -> str:
    """A path the pattern is meant to match (it may not, for some odd draws: callers filter)."""
    out: list[str] = []
    parts = pattern.strip("/").split("/")
    for part in parts:
        if part == "**":
            out += draw(st.lists(NAME, max_size=2))
            continue
        name, i = "", 0
        while i < len(part):
            c = part[i]
            if c == "*":
                name += draw(st.text(CHARS, max_size=3))
            elif c == "?":
                name += draw(st.sampled_from(CHARS))
            elif c == "[":
                end = part.index("]", i)
                body = part[i + 1:end]
                if body.startswith("!"):
                    name += draw(st.sampled_from([ch for ch in CHARS if ch not in body[1:]] or ["x"]))
                elif "-" in body and len(body) == 3:
                    name += draw(st.sampled_from([chr(o) for o in range(ord(body[0]), ord(body[2]) + 1)]))
                else:
                    name += draw(st.sampled_from(body))
                i = end
            else:
                name += c
            i += 1
        out.append(name or "x")
    if pattern.endswith("/") or draw(st.booleans()):
        out += draw(st.lists(NAME, min_size=1, max_size=2))
    return "/".join(out)


@st.composite
def paths(draw: st.DrawFn, pattern: str) -> list[str]:
    """Paths near the pattern (its own instances) and anywhere (random names), all as PathPolicy sees them."""
    near = [_instance(draw, pattern) for _ in range(draw(st.integers(1, 6)))]
    anywhere = draw(st.lists(st.lists(NAME, min_size=1, max_size=4).map("/".join), max_size=6))
    return [p for p in near + anywhere if ".." not in p.split("/") and "." not in p.split("/")]


def policy(allowed: list[str], read_only: list[str] | None = None) -> PathPolicy:
    return PathPolicy(".", allowed, read_only or [])


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), pattern=patterns(), allowed=slice_lists(), read_only=st.lists(patterns(), max_size=2))
def test_within_holds_against_the_path_policy(data: st.DataObject, pattern: str, allowed: list[str],
                                              read_only: list[str]) -> None:
    if not within(pattern, allowed, read_only):
        return
    candidate, lane = policy([pattern]), policy(allowed, read_only)
    for path in data.draw(paths(pattern)) + data.draw(paths(allowed[0])):
        if candidate.writable(path):
            assert lane.writable(path), f"{pattern!r} within {allowed} - {read_only}, yet {path!r} is not writable"


@SETTINGS
@given(data=st.data(), narrowed=slice_lists(), allowed=slice_lists(), read_only=st.lists(patterns(), max_size=2))
def test_an_accepted_narrowing_never_writes_more(data: st.DataObject, narrowed: list[str], allowed: list[str],
                                                 read_only: list[str]) -> None:
    try:
        witness = escape(narrowed, allowed, read_only)
    except Undecided:
        return
    lane, role = policy(narrowed, read_only), policy(allowed, read_only)
    if witness is not None:  # a refusal's witness is a real path that proves it
        assert lane.writable(witness) and not role.writable(witness), (narrowed, allowed, read_only, witness)
        assert narrowing_problem(narrowed, allowed, read_only) is not None
        return
    for pattern in narrowed:
        for path in data.draw(paths(pattern.lstrip("!"))):
            if lane.writable(path):
                assert role.writable(path), f"{narrowed} accepted within {allowed} - {read_only}: {path!r}"


@SETTINGS
@given(pattern=patterns(), allowed=slice_lists(), read_only=st.lists(patterns(), max_size=2))
def test_a_refusal_names_a_path_the_pattern_reaches(pattern: str, allowed: list[str], read_only: list[str]) -> None:
    """The search is exact, not merely cautious: a refused pattern reaches a path the lane may not write."""
    if within(pattern, allowed, read_only):
        return
    try:
        witness = escape([pattern], allowed, [])  # read-only paths stay in the strict sense of `within`
    except Undecided:
        return
    lane = policy(allowed, read_only)
    candidate = policy([pattern])
    if witness is not None and not lane.writable(witness):
        assert candidate.writable(witness)


@pytest.mark.parametrize("pattern", ["services/a*/", "services/a?/", "services/a[d]min/", "services/*/", "**",
                                     "services/", "services/a", "**/admin/", "services/[a-z]*/x", "*/a/"])
def test_the_widening_globs_of_the_report_are_refused(pattern: str) -> None:
    assert not within(pattern, ["services/a/"], [])
    why = narrowing_problem([pattern], ["services/a/"], [])
    assert why is not None and "which the lane may not write" in why
    witness = why.split(" reaches ")[1].split("'")[1]
    assert policy([pattern]).writable(witness) and not policy(["services/a/"]).writable(witness)


@pytest.mark.parametrize("pattern", ["services/a/", "services/a/**", "services/a/sub/", "services/a/*.py",
                                     "services/a/**/*.py", "services/a/[!x]*", "/services/a/x", "!services/b/"])
def test_real_narrowings_pass(pattern: str) -> None:
    assert within(pattern, ["services/a/"], [])
    assert narrowing_problem([pattern], ["services/a/"], []) is None


def test_read_only_paths_stay_read_only_and_a_role_s_exception_stays_out() -> None:
    # The narrowed lane keeps its role's read-only paths, so naming the role's own folder narrows nothing...
    assert narrowing_problem(["services/a/"], ["services/a/"], ["services/a/gen/"]) is None
    # ...though in the strict sense not every path under it is writable.
    assert not within("services/a/", ["services/a/"], ["services/a/gen/"])
    # A role's negated exception is not dropped by repeating only its positive pattern.
    why = narrowing_problem(["services/a/"], ["services/a/", "!services/a/secret/"], [])
    assert why is not None and "services/a/secret/" in why
    assert narrowing_problem(["services/a/", "!services/a/secret/"], ["services/a/", "!services/a/secret/"], []) is None


def test_patterns_that_cannot_be_a_slice() -> None:
    assert "'..'" in (pattern_problem("../etc/") or "")
    assert "control" in (pattern_problem("a\x1b[2J/") or "")
    assert "PathPolicy can read" in (pattern_problem("a[z-a]/") or "")
    assert pattern_problem("services/a/**/*.py") is None
    too_many = [f"services/a/{i}/" for i in range(MAX_PATTERNS + 1)]
    assert "refused" in (narrowing_problem(too_many, ["services/a/"], []) or "")


def test_plan_files_and_plans_are_checked_the_same_way(tmp_path: Path) -> None:
    roles = {"a": HelperRole(allowed_paths=["services/a/"]), "b": HelperRole(allowed_paths=["services/b/"])}
    wide = Plan(interface_contract="c", lanes=[LanePlan(lane="a", goal="g", allowed_paths=["services/a*/"])])
    assert "not within lane 'a'" in (plan_problem(wide, roles) or "")
    ghost = Plan(interface_contract="c", lanes=[LanePlan(lane="ghost", goal="g")])
    assert "unknown lane 'ghost'" in (plan_problem(ghost, roles) or "")
    lanes = tmp_path / "lanes.yaml"
    lanes.write_text("swarm:\n  lanes:\n    a: {allowed_paths: [services/a/]}\n    b: {allowed_paths: [services/b/]}\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text("interface_contract: c\nlanes:\n  - {lane: a, goal: g, allowed_paths: ['services/a[d]min/']}\n")
    with pytest.raises(ConfigError) as err:
        load_plan_file(plan, load_lanes_file(lanes))
    assert "'services/admin/x'" in str(err.value) and "lanes.0.allowed_paths" in str(err.value)
    plan.write_text("interface_contract: c\nlanes:\n  - {lane: a, goal: g, allowed_paths: ['services/a/api/']}\n")
    assert load_plan_file(plan, load_lanes_file(lanes)).lanes[0].allowed_paths == ["services/a/api/"]
