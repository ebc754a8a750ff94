"""docs/configuration.md's reference holds every key of the lanes file and the repository configuration, with its
type and default, and every environment variable the code reads (issue 48): generated (reposwarm/docs_reference.py),
and held here against the models, the loader and the code itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from reposwarm import docs_reference, envvars
from reposwarm.contracts.config import CommandRule, LanesFile
from reposwarm.lanes.loading import ENV_KNOBS, read_configuration
from tests.envscan import Project

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
SOURCES = [*sorted((ROOT / "reposwarm").rglob("*.py")), *sorted((ROOT / "workflows").rglob("*.py")),
           *sorted((ROOT / "activities").rglob("*.py")), ROOT / "worker.py", ROOT / "starter.py"]
# Reads whose names the code cannot say, by design: the expression they come from, and why.
DYNAMIC = {"passed_names()": "the names REPOSWARM_CHECK_ENV_PASS lists: the user's own, passed to checks",
           # the model proxy's upstream (reposwarm/proxy/wire.py): one per provider, the variables the built-in
           # providers read, each listed (ANTHROPIC_BASE_URL, OPENAI_BASE_URL; ANTHROPIC_API_KEY, OPENAI_API_KEY)
           "self.url_env": "a provider's base URL variable, as its built-in provider reads it",
           "self.key_env": "a provider's API key variable, as its built-in provider reads it"}
# A file that is valid, in which one key at a time is set to its documented default.
BASE = {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profile": "default", "profiles": {"default": {"commands": [["true"]]}}},
        "prices": {"openai:gpt-4.1": {"input_per_mtok": 2, "output_per_mtok": 8}}}
NAMES = {"<lane>": "api", "<profile>": "default", "<model>": "openai:gpt-4.1"}


def rows() -> dict[str, tuple[str, str, str]]:
    """The page's table of keys: key -> (type, default, meaning), as the page says them."""
    out = {}
    for line in PAGE.read_text().splitlines():
        if m := re.fullmatch(r"\| `([a-z0-9_.<>\[\]]+)` \| (.*?) \| (.*?) \| (.*) \|", line):
            out[m[1]] = (m[2], m[3], m[4])
    return out


def model_keys(model: type[BaseModel] = LanesFile, prefix: str = "") -> dict[str, Any]:
    """Every key of the models (walked here, not by the generator) -> its field."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        out[key] = field
        args = getattr(field.annotation, "__args__", ())
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out |= model_keys(field.annotation, f"{key}.")
        elif args and isinstance(args[-1], type) and issubclass(args[-1], BaseModel):
            place = {"lanes": "<lane>", "profiles": "<profile>", "prices": "<model>"}.get(name)
            out |= model_keys(args[-1], f"{prefix}commands[]." if args[-1] is CommandRule else f"{key}.{place}.")
    return out


def test_the_page_holds_what_the_code_generates() -> None:
    text = PAGE.read_text()
    assert docs_reference.rewrite(text) == text, \
        "docs/configuration.md's reference is not what the code says: run `make docs` (python -m reposwarm.docs_reference)"


def test_every_key_has_a_row_with_its_type_and_a_description() -> None:
    table = rows()
    keys = model_keys()
    assert len(keys) >= 70
    missing = sorted(set(keys) - set(table))
    assert not missing, f"keys of the models missing from docs/configuration.md: {missing}"
    for key, field in keys.items():
        kind, _, meaning = table[key]
        assert meaning == docs_reference._cell(field.description or ""), key
        assert meaning, f"{key} has no meaning in the table"
        if field.annotation in (int, float, bool):  # what the loader takes, said so
            assert kind.startswith({int: "integer", float: "number", bool: "true or false"}[field.annotation]), key
    stray = sorted(set(table) - set(keys) - {"validation.profiles.<profile>.commands[].run"})
    assert not stray, f"rows for keys the models do not have: {stray}"


def _set(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key of the table in the YAML document, a `commands[]` key in a mapping entry of its own."""
    parts = [NAMES.get(p, p) for p in key.split(".")]
    node = doc
    for part in parts[:-1]:
        if part == "commands[]":
            node["commands"] = [{"run": ["true"], parts[-1]: value}]
            return
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _get(config: Any, key: str) -> Any:
    node = config
    for part in [NAMES.get(p, p) for p in key.split(".")]:
        if part == "commands[]":
            node = node.rules["true"]
            continue
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


@pytest.mark.parametrize("key", sorted(k for k, (_, default, _) in rows().items() if default.startswith("`")))
def test_a_documented_default_is_what_the_loader_gives(tmp_path: Path, key: str) -> None:
    """Each stated default, written into a real file, is taken by the loader, and is the model's own default: a
    default that differs, a key the loader does not know, or a value it refuses fails here."""
    said = yaml.safe_load(rows()[key][1].strip("`"))
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    _set(doc, key, said)
    path = tmp_path / "reposwarm.yaml"
    path.write_text(yaml.safe_dump(doc))
    config, _ = read_configuration(path)
    field = model_keys()[key]
    expected = field.get_default(call_default_factory=True)
    assert _get(config, key) == expected == said, f"{key}: the page says {said!r}, the model {expected!r}"


def test_the_required_keys_are_said_to_be() -> None:
    table = rows()
    for key, field in model_keys().items():
        assert (table[key][1] == "required") == field.is_required(), key


def test_every_environment_variable_the_code_reads_is_listed() -> None:
    found = Project(SOURCES, ROOT).reads()
    listed = envvars.by_name()
    families = [name.removesuffix("*") for name in listed if name.endswith("*")]
    unlisted = {name: where[:3] for name, where in found.names.items()
                if name not in listed and not any(name.startswith(f) for f in families)}
    assert not unlisted, f"environment variables read but not in reposwarm/envvars.py: {unlisted}"
    unknown = [u for u in found.unknown if u[2] not in DYNAMIC]
    assert not unknown, ("environment reads whose variable cannot be told (name it with a string or a module "
                         f"constant): {unknown}")
    assert set(ENV_KNOBS) <= set(listed)
    # and nothing listed as reposwarm's that nothing reads (a variable removed from the code, or misspelt here)
    stale = [v.name for v in envvars.VARIABLES if v.owner == envvars.REPOSWARM and v.name not in found.names]
    assert not stale, f"listed in reposwarm/envvars.py as read by reposwarm, read nowhere: {stale}"
    scripts = (ROOT / "Makefile").read_text() + (ROOT / "temporal-dev").read_text()
    for v in envvars.VARIABLES:
        if v.owner.startswith("make"):
            assert v.name in scripts, v.name


def test_the_scan_finds_what_it_should(tmp_path: Path) -> None:
    """The scanner itself, on code of each form it reads: a variable it missed would never be listed."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "names.py").write_text('SWITCH = "A_CONST"\nTABLE = {"x": ("A_TUPLE_0", "A_TUPLE_1")}\n')
    (tmp_path / "pkg" / "reads.py").write_text('''
import os
from pkg import names
from pkg.names import TABLE

def number(name, default):
    return os.environ.get(name, default)

def all_of_them(provider):
    os.environ.get("A_LITERAL")
    os.getenv("A_GETENV")
    os.environ["A_SUBSCRIPT"]
    "A_IN" in os.environ
    os.environ.get(names.SWITCH)
    for key in ("A_LOOP_1", "A_LOOP_2"):
        os.environ.get(key)
    _, base = TABLE[provider]
    os.environ.get(base)
    env = dict(os.environ)
    env["A_COPY"]
    number("A_PARAM", 3)
    os.environ.get(provider.upper())
''')
    found = Project([tmp_path / "pkg" / "names.py", tmp_path / "pkg" / "reads.py"], tmp_path).reads()
    assert set(found.names) == {"A_LITERAL", "A_GETENV", "A_SUBSCRIPT", "A_IN", "A_CONST", "A_LOOP_1", "A_LOOP_2",
                                "A_TUPLE_1", "A_COPY", "A_PARAM"}
    assert [u[2] for u in found.unknown] == ["provider.upper()"]


def test_the_generator_refuses_a_key_without_a_description() -> None:
    from pydantic import Field

    class Bare(BaseModel):
        said: int = Field(default=1, description="one")
        unsaid: int = 2

    with pytest.raises(ValueError, match="unsaid has no description"):
        list(docs_reference.config_rows(Bare))


def test_the_command_line_checks_and_rewrites(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# a page\n\n{docs_reference.BEGIN}\nold\n{docs_reference.END}\n\nafter\n")
    assert docs_reference.main(["--check", "--page", str(page)]) == 1
    assert docs_reference.main(["--page", str(page)]) == 0
    assert docs_reference.main(["--check", "--page", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# a page\n") and text.endswith("\n\nafter\n") and "`swarm.lanes.<lane>.token_budget`" in text
