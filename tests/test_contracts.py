"""The contracts package: every old name still imports, every result model decodes what older workers recorded,
every lane state is an enum with the strings statuses held, and workflows import nothing that runs processes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

import reposwarm.contracts as contracts
from reposwarm.contracts import (
    Attribution,
    ChangeSet,
    CheckpointResult,
    FileEdit,
    LaneDescription,
    LanePhase,
    LaneResult,
    LaneReview,
    LaneState,
    LaneStatus,
    RollbackResult,
    TrialClone,
    Usage,
)
from tests.helpers import ROOT

# Every name `from reposwarm.contracts import X` served when it was one module.
NAMES_OF_THE_MODULE = """
AttributeInput ChangeSet CheckProfile CheckpointInput CommandResult ConflictInput Contract Delivered DeliverInput
DeliveryConfig FileEdit Finish HelperRole HelperTask LaneEstimate LanePlan LaneResult LaneResume LaneReview LaneState
LaneStatus LaneWorktree LanesFile MergeInput MergeResult ModelPrice ModelTurnInput ModelTurnResult Overlap Phase Plan
PlanInput PlanOutcome PrepareInput PrepareResult PublishInput Published Resolution ReviewDecision ReviewPackage
ReviewReceipt RollbackInput ScoreInput SwarmConfig SwarmRequest SwarmResult SwarmResume SwarmStatus TestFailure
TestReport ToolCall ToolInput ToolOutcome TrialBatchRequest TrialBatchResult TrialScore TrialSpec Usage ValidateInput
ValidationConfig
""".split()


def decode(value: object, type_hint: type) -> object:
    """As a worker decodes an activity result from history: JSON bytes through the pydantic data converter."""
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([value])
    return pydantic_data_converter.payload_converter.from_payloads([payload], [type_hint])[0]


def test_every_name_of_the_one_module_still_imports():
    assert [n for n in NAMES_OF_THE_MODULE if not hasattr(contracts, n)] == []
    assert set(NAMES_OF_THE_MODULE) <= set(contracts.__all__)
    defined = {name for name, value in vars(contracts).items() if isinstance(value, type)
               and value.__module__.startswith("reposwarm.contracts.")}
    assert defined == set(contracts.__all__)


def test_describe_lane_as_recorded_before_its_model():
    old = {"__head__": "a" * 40, "__stat__": " api/app.py | 2 +-", "api/app.py": "M", "api/new.py": "A"}
    described = decode(old, LaneDescription)
    assert described == LaneDescription(head_sha="a" * 40, diff_stat=" api/app.py | 2 +-",
                                        files={"api/app.py": "M", "api/new.py": "A"})
    assert decode({"__head__": "b" * 40, "__stat__": ""}, LaneDescription).files == {}
    assert decode(described.model_dump(mode="json"), LaneDescription) == described  # and the new shape


def test_attribute_failures_as_recorded_before_its_model():
    old = {"api": ["pytest::api/test_app.py::test_total"], "web": []}
    assert decode(old, Attribution) == Attribution(by_lane=old)
    assert decode({}, Attribution) == Attribution()
    assert decode({"by_lane": ["k"]}, Attribution).by_lane == {"by_lane": ["k"]}  # a lane named by_lane
    assert decode(Attribution(by_lane=old).model_dump(mode="json"), Attribution).by_lane == old


@pytest.mark.parametrize(("model", "field"), [(CheckpointResult, "head_sha"), (RollbackResult, "integration_sha"),
                                              (TrialClone, "path")])
def test_a_bare_string_as_recorded_before_its_model(model, field):
    assert getattr(decode("c" * 40, model), field) == "c" * 40
    new = model.model_validate({field: "d" * 40})
    assert decode(new.model_dump(mode="json"), model) == new


def test_exit_classes_and_trial_outcomes_decode_what_was_recorded_as_free_text():
    from reposwarm.contracts import CommandResult, ExitClass, TrialOutcome, TrialScore

    recorded = {"argv": ["pytest"], "exit_code": 1, "duration_s": 1.0, "exit_class": "tests failed"}
    assert decode(recorded, CommandResult).exit_class == ExitClass.tests_failed
    assert decode({**recorded, "exit_class": ""}, CommandResult).exit_class is None  # before classes existed
    with pytest.raises(ValueError):
        CommandResult.model_validate({**recorded, "exit_class": "mostly fine"})
    score = decode({"sha": "a" * 40, "run_id": "r", "message": "m", "status": "failed: not approved: red"},
                   TrialScore)
    assert (score.status, score.failure) == (TrialOutcome.failed, "not approved: red")
    assert decode({"sha": "a" * 40, "run_id": "r", "message": "m", "status": "scored"}, TrialScore).failure == ""


def test_lane_phases_are_the_strings_statuses_held():
    assert {p.value for p in LanePhase} == {
        "starting", "pending", "running", "paused at its budget", "done", "budget_exhausted", "failed", "cancelled",
        "merged", "merged (budget exhausted)", "redo after conflict", "conflict"}
    assert {LanePhase.ended(s) for s in LaneStatus} <= set(LanePhase)
    state = decode({"lane": "api", "state": "merged (budget exhausted)"}, LaneState)
    assert state.state is LanePhase.merged_budget_exhausted and state.state == "merged (budget exhausted)"
    assert f"{state.state:<12}|" == "merged (budget exhausted)|" and str(LanePhase.redo_after_conflict) == \
        "redo after conflict"
    assert state.model_dump(mode="json")["state"] == "merged (budget exhausted)"
    assert LaneState(lane="api").state is LanePhase.pending
    with pytest.raises(ValueError):
        LaneState(lane="api", state="thinking")


def test_a_lane_review_is_built_from_its_result():
    edit = FileEdit(path="api/app.py", operation="modify", reason="Set VERSION to 2 as asked")
    result = LaneResult(lane="api", status=LaneStatus.budget_exhausted, reason="turn budget of 3 used up",
                        usage=Usage(input_tokens=10, output_tokens=5, model_calls=1), turns=3, tool_calls=4,
                        refusals=1, elapsed_s=2.5,
                        changeset=ChangeSet(task_id="t", edits=[edit], summary="s", assumptions=["a"],
                                            diff_stat="1 file", conflicts=["x"]))
    review = LaneReview.of(result, "Set VERSION to 2.")
    assert review == LaneReview(lane="api", goal="Set VERSION to 2.", status=LaneStatus.budget_exhausted,
                                reason="turn budget of 3 used up", summary="s", assumptions=["a"], edits=[edit],
                                diff_stat="1 file", usage=result.usage, turns=3, tool_calls=4, refusals=1,
                                elapsed_s=2.5)


# --- workflows decide; they import nothing that runs a process ---

FORBIDDEN = {"subprocess", "git", "multiprocessing", "reposwarm.vcs.gitcmd"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def _source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_workflows_import_nothing_that_runs_a_process():
    """The import closure of workflows/*.py, but for activity modules (imported for the activity functions they
    schedule, passed through the sandbox): no subprocess, no GitPython, no git seam."""
    todo = [f"workflows.{p.stem}" for p in (ROOT / "workflows").glob("*.py")]
    seen: dict[str, str] = {}  # module -> the module that imported it
    offending = []
    while todo:
        module = todo.pop()
        path = _source(module)
        if path is None:
            continue
        for name in _imports(path):
            top = name.split(".")[0]
            if name in FORBIDDEN or top in FORBIDDEN or name.startswith("reposwarm.vcs.gitcmd"):
                offending.append(f"{module} imports {name}")
            if top in ("workflows", "reposwarm") and name not in seen and _source(name) is not None:
                seen[name] = module
                todo.append(name)
        # a package's modules run their package's __init__ first
        parent = module.rpartition(".")[0]
        if parent and parent not in seen:
            seen[parent] = module
            todo.append(parent)
    assert "reposwarm.contracts.lane" in seen and "reposwarm.checks.verdicts" in seen  # the walk did walk
    assert not any(m.startswith("activities") for m in seen)
    assert offending == []
