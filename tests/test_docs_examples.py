"""What the pages show runs as shown (issue 48): the README's lanes block is a lanes file the loader takes, for the
example repository the README names, with the README's own models; the examples show Claude as well as GPT, by the
names the code knows; the first-run page is reachable from the README's top."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from reposwarm.cli.common import UserError, resolve_model
from reposwarm.cli.runs import unpriced
from reposwarm.contracts.errors import ConfigError
from reposwarm.lanes.loading import read_lanes_file
from reposwarm.models.limits import ANTHROPIC_OUTPUT_LIMITS
from reposwarm.models.prices import PRICES, models_in_use, table_name, with_list_prices

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLE_PAGES = ("configuration.md", "lanes.md", "cost.md", "trying.md")
FIRST_RUN = "docs/first-run.md"
README_TOP = 60  # lines: the first run is linked before the reader needs it


def example_file(named: str) -> Path | None:
    """The example file a page names, where it is now (the demo moved from examples/demo to reposwarm/demo)."""
    for candidate in (named, named.replace("examples/demo/", "reposwarm/demo/"),
                      named.replace("reposwarm/demo/", "examples/demo/")):
        if "/" in candidate and (ROOT / candidate).is_file():
            return ROOT / candidate
    return None


def readme_lanes_block(readme: str) -> tuple[str, str]:
    """The README's lanes file: the sentence that introduces it, and the first yaml block under "### The lanes
    file"."""
    section = readme.split("### The lanes file", 1)[1]
    found = re.search(r"\n\n([^\n`][^\n]*(?:\n[^\n]+)*)\n\n```yaml\n(.*?)```", section, re.S)
    assert found, "no yaml block under the README's ### The lanes file"
    return found[1], found[2]


def tracked(folder: Path) -> list[str]:
    """The files of the checkout's `folder`, relative to it (as a run of that repository sees them)."""
    done = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", str(folder.relative_to(ROOT))],
                          capture_output=True, text=True, check=True)
    prefix = str(folder.relative_to(ROOT)) + "/"
    return [name.removeprefix(prefix) for name in done.stdout.split("\0") if name]


def lanes_block_problems(sentence: str, block: str, readme_models: list[str], tmp: Path) -> list[str]:
    """What is wrong with a README's lanes block as the lanes file of the example it names: everything, at once."""
    named = [(name, found) for name in re.findall(r"`([\w./-]+\.ya?ml)`", sentence)
             if (found := example_file(name)) is not None]
    if not named:
        return [f"the sentence before the block names no example file of the checkout: {sentence!r}"]
    shown_as, example = named[0]
    path = tmp / example.name
    path.write_text(block)
    repo = example.parent / "repo"
    try:
        config, findings = read_lanes_file(path, tracked(repo), root=repo, at=" in the example", tools_on_path=False)
    except ConfigError as err:
        return [f"the loader refuses it: {err}"]
    problems = [f"warning: {w}" for w in findings.warnings]
    models = ([("swarm.model", config.swarm.model)] if config.swarm.model else []) + [
        (f"swarm.lanes.{name}.model", role.model) for name, role in config.swarm.lanes.items() if role.model]
    for where, model in models:
        try:
            resolve_model(model, example.parent, where)
        except UserError as err:
            problems.append(str(err))
    for model in readme_models:  # the README's own run command, with this file as its lanes file
        priced = with_list_prices(config, models_in_use(config, model))
        try:
            unpriced(priced, model, path)
        except UserError as err:
            problems.append(f"with --model {model}: {err}")
    if re.search(r"\bas is\b", sentence, re.I):
        shown, _ = read_lanes_file(example)
        if shown.model_dump() != config.model_dump():
            problems.append(f"the README says the block is {shown_as} as is; it is not")
    return problems


def test_the_readme_s_lanes_block_is_a_lanes_file_of_the_example_it_names(tmp_path: Path) -> None:
    readme = README.read_text()
    sentence, block = readme_lanes_block(readme)
    models = sorted(set(re.findall(r"--model ((?:openai|anthropic):[\w.-]+)", readme)))
    assert models, "the README's run command names no model"
    problems = lanes_block_problems(sentence, block, models, tmp_path)
    assert not problems, "the README's lanes block, as its lanes file:\n" + "\n".join(problems)


def test_a_lanes_block_that_is_wrong_is_said_to_be(tmp_path: Path) -> None:
    """The check itself: each kind of problem it exists for is found."""
    example = example_file("reposwarm/demo/lanes.yaml")
    assert example is not None
    as_is = example.read_text()
    assert lanes_block_problems("The demo's, as is (`reposwarm/demo/lanes.yaml`):", as_is, ["openai:gpt-4.1"],
                                tmp_path) == []
    changed = as_is.replace("max_parallel: 3", "max_parallel: 2\n  cost_budget_usd: 5\n  model: replay:none.yaml")
    problems = lanes_block_problems("As is (`examples/demo/lanes.yaml`):", changed, ["openai:gpt-0"], tmp_path)
    assert any("replay script not found: none.yaml" in p for p in problems), problems
    assert any("with --model openai:gpt-0" in p and "needs a price" in p for p in problems), problems
    assert any("is not" in p and "as is" in p for p in problems), problems
    slices = as_is.replace('["db/"], read_only_paths: ["services/"]', '["db2/"], read_only_paths: ["services/"]')
    assert any("db2/" in p for p in lanes_block_problems("(`reposwarm/demo/lanes.yaml`)", slices, [], tmp_path))


def code_blocks(page: str) -> list[str]:
    """Fenced blocks and indented (4-space) command blocks."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", page, re.S)
    rest = re.sub(r"```.*?```", "", page, flags=re.S)
    indented = re.findall(r"(?:^|\n\n)((?: {4}[^\n]*\n?)+)", rest)
    return fenced + indented


@pytest.mark.parametrize("name", EXAMPLE_PAGES)
def test_an_example_for_gpt_is_shown_for_claude_too(name: str) -> None:
    page = (ROOT / "docs" / name).read_text()
    for block in code_blocks(page):
        gpt, claude = "openai:gpt" in block, "anthropic:claude" in block
        assert gpt == claude, f"docs/{name}: an example for {'GPT' if gpt else 'Claude'} only:\n{block}"


@pytest.mark.parametrize("name", ["README.md", *(f"docs/{n}" for n in EXAMPLE_PAGES), FIRST_RUN])
def test_model_names_in_the_examples_are_spelt_as_the_code_knows_them(name: str) -> None:
    """A Claude name is one the code has an output limit and a list price for (a typo would run with guessed
    limits and no price); a GPT name too has its price."""
    if not (ROOT / name).is_file():
        pytest.skip(f"{name} is not written yet")
    text = (ROOT / name).read_text()
    for provider, model in set(re.findall(r"\b(anthropic|openai):([a-z][\w./-]*[\w])", text)):
        full = f"{provider}:{model}"
        if provider == "anthropic":
            assert any(model.startswith(family) for family, _ in ANTHROPIC_OUTPUT_LIMITS), f"{name}: {full}"
        if "/" not in model:  # (a gateway's own name has the gateway's price)
            assert table_name(full) in PRICES, f"{name}: {full} has no list price"


def test_the_first_run_is_linked_from_the_readme_s_top() -> None:
    assert (ROOT / FIRST_RUN).is_file()
    top = "\n".join(README.read_text().splitlines()[:README_TOP])
    assert f"]({FIRST_RUN})" in top, f"README.md's first {README_TOP} lines do not link {FIRST_RUN}"

