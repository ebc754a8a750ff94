"""The list prices reposwarm ships for the current Claude and GPT models, so a run's costs show in dollars and a
cost budget counts without the user looking prices up first.

These are the providers' published list prices (US dollars per million tokens: input, cached input, a write to
the 5-minute and to the one-hour cache, output) as of PRICES_AS_OF, for the standard tier: no batch discount, no
long-context surcharge, no negotiated rate. They are not fetched at run time. A price in the configuration's own
`prices:` (the lanes file, the repository's reposwarm.yaml, --config) wins over this table, model by model, so a
changed price, a discount or a gateway's own rate is one entry there (docs/cost.md). A model the table does not
know still runs: a warning names it and how to price it, and its costs show as tokens only.

Model names are the project's `provider:model` (reposwarm/models/__init__.py). A dated snapshot
(`claude-sonnet-4-5-20250929`, `gpt-4.1-2025-04-14`) or `-latest` is priced as its model; a gateway's own name
(`openai:anthropic/claude-sonnet-4.5`) is not, as the gateway sets its own prices.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from reposwarm.contracts import LanesFile, ModelPrice

PRICES_AS_OF = "2026-12-02"
SOURCES = ("https://platform.claude.com/docs/en/about-claude/pricing", "https://platform.openai.com/docs/pricing")
BILLED_PROVIDERS = ("anthropic", "openai")  # replay and oracle models bill nothing: no price is needed


def _anthropic(input: float, output: float, read: float | None = None, write: float | None = None,
               write_1h: float | None = None) -> ModelPrice:
    """A Claude model's price: its cache reads at 0.1x input, writes at 1.25x (5 minutes) and 2x (an hour), unless
    the price page gives other figures."""
    return ModelPrice(input_per_mtok=input, output_per_mtok=output,
                      cached_input_per_mtok=round(input * 0.1, 6) if read is None else read,
                      cache_write_per_mtok=round(input * 1.25, 6) if write is None else write,
                      cache_write_1h_per_mtok=round(input * 2, 6) if write_1h is None else write_1h)


def _openai(input: float, cached: float, output: float) -> ModelPrice:
    """A GPT model's price: its cached input as published; OpenAI bills no surcharge for writing the cache."""
    return ModelPrice(input_per_mtok=input, output_per_mtok=output, cached_input_per_mtok=cached,
                      cache_write_per_mtok=input, cache_write_1h_per_mtok=input)


# List prices as of PRICES_AS_OF, US dollars per million tokens; overridable per model in `prices:`.
# Left out on purpose: models priced by prompt length (Claude Haiku 5.5's two bands) and OpenAI's newest
# families, whose list prices moved several times in 2026; they run with the warning until given a price.
PRICES: dict[str, ModelPrice] = {
    # Anthropic (cache reads 0.1x input, 5-minute writes 1.25x, one-hour writes 2x, except where noted)
    "anthropic:claude-opus-5-5": _anthropic(4, 20, read=0.20),  # cache reads at 0.05x input
    "anthropic:claude-opus-5": _anthropic(5, 25),
    "anthropic:claude-opus-4-8": _anthropic(5, 25),
    "anthropic:claude-opus-4-7": _anthropic(5, 25),
    "anthropic:claude-opus-4-6": _anthropic(5, 25),
    "anthropic:claude-opus-4-5": _anthropic(5, 25),
    "anthropic:claude-opus-4-1": _anthropic(15, 75),
    "anthropic:claude-opus-4-0": _anthropic(15, 75),
    "anthropic:claude-opus-4": _anthropic(15, 75),
    "anthropic:claude-sonnet-5-5": _anthropic(2, 10, read=0.10),  # cache reads at 0.05x input since 2026-10-07
    "anthropic:claude-sonnet-5": _anthropic(2, 10),
    "anthropic:claude-sonnet-4-6": _anthropic(3, 15),
    "anthropic:claude-sonnet-4-5": _anthropic(3, 15),
    "anthropic:claude-sonnet-4-0": _anthropic(3, 15),
    "anthropic:claude-sonnet-4": _anthropic(3, 15),
    "anthropic:claude-3-7-sonnet": _anthropic(3, 15),
    "anthropic:claude-haiku-4-5": _anthropic(1, 5),
    "anthropic:claude-3-5-haiku": _anthropic(0.80, 4),
    "anthropic:claude-3-haiku": _anthropic(0.25, 1.25, read=0.03, write=0.30, write_1h=0.50),
    # OpenAI (input, cached input, output)
    "openai:gpt-5.1": _openai(1.25, 0.125, 10),
    "openai:gpt-5": _openai(1.25, 0.125, 10),
    "openai:gpt-5-mini": _openai(0.25, 0.025, 2),
    "openai:gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "openai:gpt-4.1": _openai(2, 0.50, 8),
    "openai:gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "openai:gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "openai:gpt-4o": _openai(2.50, 1.25, 10),
    "openai:gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "openai:o3": _openai(2, 0.50, 8),
    "openai:o4-mini": _openai(1.10, 0.275, 4.40),
    "openai:o3-mini": _openai(1.10, 0.55, 4.40),
}

# A snapshot's date (Anthropic's -20250929, OpenAI's -2025-04-14) or an alias's -latest: the same model's price.
_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def table_name(model_name: str) -> str:
    """The table's key for a model name: lower case, its snapshot date or -latest dropped."""
    return _SNAPSHOT.sub("", model_name.strip().lower())


def shipped_price(model_name: str) -> ModelPrice | None:
    """The list price reposwarm ships for a model (None: not in the table)."""
    return PRICES.get(table_name(model_name))


def needs_price(model_name: str) -> bool:
    """Whether a model bills money (a provider's), so a missing price leaves its costs as tokens only."""
    return model_name.partition(":")[0] in BILLED_PROVIDERS


def price_of(model_name: str, configured: dict[str, ModelPrice]) -> tuple[ModelPrice | None, str]:
    """A model's price and where it came from: the configuration's own (by the exact name), else the table's
    ("configuration", "list price as of ..."), or (None, "") for neither."""
    if model_name in configured:
        return configured[model_name], "configuration"
    found = shipped_price(model_name)
    return (found, f"list price as of {PRICES_AS_OF}") if found is not None else (None, "")


def models_in_use(config: LanesFile, model: str) -> list[str]:
    """Every model a run of this configuration calls: the run's (planner, converger, lanes without their own) and
    each lane's own."""
    return list(dict.fromkeys([model, *(role.model for role in config.swarm.lanes.values() if role.model)]))


def unpriced_line(model_name: str) -> str:
    return (f"no price for {model_name} (not in reposwarm's list prices as of {PRICES_AS_OF}): its costs show as "
            f"tokens only and a cost budget cannot count it; give it one in the configuration's prices: "
            f"{{{model_name}: {{input_per_mtok: N, output_per_mtok: N}}}} (docs/cost.md)")


_WARNED: set[str] = set()  # models already warned about by this process: a warning is said once


def with_list_prices(config: LanesFile, models: Iterable[str]) -> LanesFile:
    """The configuration with the shipped list price of each model in `models` that its own `prices:` leaves
    out (its own entries are kept as they are), so the workflows, which look prices up by model name, find
    them. A model that bills money and has no price either way is warned about on stderr, once per process."""
    prices = dict(config.prices)
    for name in dict.fromkeys(models):
        if name in prices or not needs_price(name):
            continue
        found = shipped_price(name)
        if found is not None:
            prices[name] = found
        elif name not in _WARNED:
            _WARNED.add(name)
            print(f"warning: {unpriced_line(name)}", file=sys.stderr)
    return config if prices == config.prices else config.model_copy(update={"prices": prices})
