"""Prices that ship (reposwarm/models/prices.py): a run or a dry run on a model of the table shows its costs in
dollars with no `prices:` written; the configuration's own price wins; a model the table does not know still
runs, said once, with tokens only; the README's lanes block (with cost_budget_usd) is accepted with
--model openai:gpt-4.1, as the README runs it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from reposwarm.cli.common import UserError
from reposwarm.cli.runs import build_request, render_dry_run, start
from reposwarm.models.prices import PRICES, PRICES_AS_OF, shipped_price
from tests.helpers import ROOT, make_repo, write_yaml
from workflows.swarm import SwarmWorkflow

# The models issue 48 names: every one has a list price, as its users name it.
NAMED = ["anthropic:claude-opus-4-1", "anthropic:claude-opus-4-5", "anthropic:claude-sonnet-4",
         "anthropic:claude-sonnet-4-5", "anthropic:claude-haiku-4-5", "anthropic:claude-3-5-haiku",
         "openai:gpt-4.1", "openai:gpt-4.1-mini", "openai:gpt-4.1-nano", "openai:gpt-4o", "openai:gpt-4o-mini",
         "openai:o3", "openai:o4-mini", "openai:gpt-5", "openai:gpt-5-mini", "openai:gpt-5-nano"]


def test_the_table_is_dated_and_prices_every_named_model_with_its_cache_rates() -> None:
    assert re.fullmatch(r"2026-\d\d-\d\d", PRICES_AS_OF)
    for name in NAMED:
        price = shipped_price(name)
        assert price is not None, name
        assert price.output_per_mtok > price.input_per_mtok > 0, name
        assert price.cached_input_per_mtok is not None and price.cached_input_per_mtok < price.input_per_mtok, name
        if name.startswith("anthropic:"):  # the provider's published ratios: writes 1.25x and 2x input
            assert price.cache_write_per_mtok == pytest.approx(price.input_per_mtok * 1.25), name
            assert price.cache_write_1h_per_mtok == pytest.approx(price.input_per_mtok * 2), name
        else:  # OpenAI bills no surcharge for writing its cache
            assert price.cache_write_per_mtok == price.input_per_mtok, name
    # a few figures as published, so a slip in the table is caught
    assert (PRICES["anthropic:claude-sonnet-4-5"].input_per_mtok, PRICES["anthropic:claude-sonnet-4-5"]
            .output_per_mtok, PRICES["anthropic:claude-sonnet-4-5"].cached_input_per_mtok) == (3, 15, 0.3)
    assert (PRICES["openai:gpt-4.1"].input_per_mtok, PRICES["openai:gpt-4.1"].cached_input_per_mtok,
            PRICES["openai:gpt-4.1"].output_per_mtok) == (2, 0.5, 8)
    # a dated snapshot or -latest is its model; a gateway's own name and the free models are not priced here
    assert shipped_price("anthropic:claude-sonnet-4-5-20250929") == PRICES["anthropic:claude-sonnet-4-5"]
    assert shipped_price("openai:gpt-4.1-2025-04-14") == PRICES["openai:gpt-4.1"]
    assert shipped_price("anthropic:claude-3-5-haiku-latest") == PRICES["anthropic:claude-3-5-haiku"]
    assert shipped_price("anthropic:claude-opus-4-5") != shipped_price("anthropic:claude-opus-4")  # not by prefix
    for name in ("openai:anthropic/claude-sonnet-4.5", "openai:llama3.1:8b", "replay:/tmp/script.yaml"):
        assert shipped_price(name) is None


def small_repo(tmp_path: Path, prices: dict[str, Any] | None = None, swarm: dict[str, Any] | None = None,
               lanes: dict[str, Any] | None = None) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "A = 1\n", "web/app.js": "exports.a = 1;\n"})
    data: dict[str, Any] = {"swarm": {"lanes": lanes or {"api": {"allowed_paths": ["api/"]},
                                                         "web": {"allowed_paths": ["web/"]}}, **(swarm or {})}}
    if prices is not None:
        data["prices"] = prices
    lanes_path = write_yaml(tmp_path / "lanes.yaml", data)
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": name, "goal": f"Set A to 2 in {name}/."} for name in data["swarm"]["lanes"]]})
    return repo, lanes_path, plan


def request(repo: Path, lanes: Path, model: str, plan: Path | None = None) -> Any:
    ns = argparse.Namespace(repo=str(repo), task="Set A to 2", lanes=str(lanes), plan=str(plan) if plan else None,
                            model=model)
    return build_request(ns)


def test_the_configuration_price_wins_and_the_table_fills_in_the_rest(tmp_path: Path) -> None:
    own = {"input_per_mtok": 1.5, "output_per_mtok": 6}  # a negotiated rate, say
    repo, lanes, _ = small_repo(tmp_path, prices={"openai:gpt-4.1": own},
                                lanes={"api": {"allowed_paths": ["api/"]},
                                       "web": {"allowed_paths": ["web/"], "model": "anthropic:claude-haiku-4-5"}})
    req = request(repo, lanes, "openai:gpt-4.1")
    assert req.config.prices["openai:gpt-4.1"].model_dump(exclude_none=True) == own
    assert req.config.prices["anthropic:claude-haiku-4-5"] == PRICES["anthropic:claude-haiku-4-5"]
    assert set(req.config.prices) == {"openai:gpt-4.1", "anthropic:claude-haiku-4-5"}  # only the models in use


def test_an_unknown_model_runs_with_one_warning_and_tokens_only(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    repo, lanes, _ = small_repo(tmp_path)
    model = "openai:qwen2.5-coder-32b-local"  # an OpenAI-compatible local server's model
    first = request(repo, lanes, model)
    request(repo, lanes, model)
    err = capsys.readouterr().err
    assert err.count(f"warning: no price for {model}") == 1, err  # said once, not per request
    assert f"prices: {{{model}: {{input_per_mtok: N, output_per_mtok: N}}}}" in err
    assert model not in first.config.prices
    # a cost budget cannot count it: that is still refused, naming the model
    _, budgeted, _ = small_repo(tmp_path / "b", swarm={"cost_budget_usd": 5})
    with pytest.raises(UserError, match=re.escape(f"swarm.cost_budget_usd needs a price for {model}")):
        request(repo, budgeted, model)


def readme_lanes_block() -> dict[str, Any]:
    """The README's lanes file block (under "### The lanes file"), with the placeholder `model: ...` of a lane
    (an optional per-lane model) left out, as a user copying it would fill it in or drop it."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### The lanes file", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, "README.md: no yaml block under ### The lanes file"
    data = yaml.safe_load(block.group(1))
    for role in data["swarm"]["lanes"].values():
        if role.get("model") == "...":
            del role["model"]
    return data


def test_the_readme_lanes_block_with_cost_budgets_is_accepted_with_gpt_4_1(tmp_path: Path) -> None:
    data = readme_lanes_block()
    assert data["swarm"]["cost_budget_usd"] and data["swarm"]["lanes"]["api_layer"]["cost_budget_usd"]
    repo = make_repo(tmp_path / "repo", {"services/api/taskboard_api/app.py": "A = 1\n", "db/schema.sql": "-- x\n",
                                         "services/api/tests/test_app.py": "def test_a():\n    pass\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", data)
    req = request(repo, lanes, "openai:gpt-4.1")  # was refused: "cost_budget_usd needs a price for openai:gpt-4.1"
    assert req.config.prices["openai:gpt-4.1"] == PRICES["openai:gpt-4.1"]
    assert req.config.swarm.cost_budget_usd == data["swarm"]["cost_budget_usd"]
    assert "anthropic:claude-sonnet-4-5" in req.config.prices  # the block's own price stays
    # with Claude as the README shows it too
    assert request(repo, lanes, "anthropic:claude-sonnet-4-5").config.prices["anthropic:claude-sonnet-4-5"] \
        .output_per_mtok == data["prices"]["anthropic:claude-sonnet-4-5"]["output_per_mtok"]


@pytest.mark.usefixtures("worker")
async def test_a_dry_run_on_a_listed_model_shows_its_cost_in_dollars(client: Client, tmp_path: Path) -> None:
    repo, lanes, plan = small_repo(tmp_path, lanes={
        "api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"], "model": "anthropic:claude-sonnet-4-5"}})
    req = request(repo, lanes, "openai:gpt-4.1", plan)  # no prices: in the lanes file
    req.dry_run = True
    await start(client, req)
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id).result()
    estimates = {e.lane: e for e in result.estimates}
    assert {e.model for e in estimates.values()} == {"openai:gpt-4.1", "anthropic:claude-sonnet-4-5"}
    for e in estimates.values():
        assert e.cost_usd is not None and 0 < e.cost_usd <= (e.uncached_cost_usd or 0), e
    text = render_dry_run(result)
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()[:1] in (["api"], ["web"])}
    assert "no price" not in text and all("$" in row for row in rows.values()), text
    total = re.search(r"total estimated cost: \$([0-9.]+) with prompt caching", text)
    assert total is not None and float(total.group(1)) == pytest.approx(
        sum(e.cost_usd or 0 for e in estimates.values()), abs=1e-4)
