"""docs/configuration.md's reference, generated: every key of the lanes file and the repository configuration (from
the contracts' fields: type, default, description) and every environment variable (reposwarm/envvars.py).

    python -m reposwarm.docs_reference           rewrite the table between the markers in docs/configuration.md
    python -m reposwarm.docs_reference --check   exit 1 if the page is not what the code says (make docs does the first)

A key's meaning is its field's `description=` in reposwarm/contracts/; a variable's is its line in envvars.py. The
text between the markers is this module's output only: edit those, then run it. tests/test_config_reference.py fails
while the page and the code differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from reposwarm.contracts.config import CommandRule, LanesFile
from reposwarm.envvars import GROUPS, REPOSWARM

BEGIN = "<!-- BEGIN the generated reference: python -m reposwarm.docs_reference (make docs) rewrites it -->"
END = "<!-- END the generated reference -->"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

# A mapping of named entries: how its names are shown in a key's path.
PLACEHOLDERS = {"lanes": "<lane>", "profiles": "<profile>", "prices": "<model>"}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    meaning: str


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _optional(annotation: Any) -> tuple[Any, bool]:
    """`X | None` is (X, True)."""
    if get_origin(annotation) in (Union, UnionType) and type(None) in get_args(annotation):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return (options[0] if len(options) == 1 else Union[tuple(options)]), True  # noqa: UP007 (a runtime Union)
    return annotation, False


def _type_name(annotation: Any, plural: bool = False) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        return " or ".join(_type_name(a, plural) for a in args)
    if origin is Literal:
        return " or ".join(f"`{json.dumps(v)[1:-1] if isinstance(v, str) else v}`" for v in args)
    if origin is list:
        return f"{'lists' if plural else 'list'} of {_type_name(args[0], plural=True)}"
    if origin is dict:
        return f"{'mappings' if plural else 'mapping'} of names to {_type_name(args[1], plural=True)}"
    if _model_of(annotation) is not None:
        return "mappings" if plural else "mapping"
    names = {int: ("integer", "integers"), float: ("number", "numbers"), bool: ("true or false", "true or false"),
             str: ("string", "strings")}
    if annotation in names:
        return names[annotation][plural]
    raise TypeError(f"no name for the type {annotation!r}: teach reposwarm/docs_reference.py")


def _constraints(field: FieldInfo) -> str:
    said = []
    for item in field.metadata:
        for kind, attr, sign in ((annotated_types.Gt, "gt", ">"), (annotated_types.Ge, "ge", "≥"),
                                 (annotated_types.Lt, "lt", "<"), (annotated_types.Le, "le", "≤")):
            if isinstance(item, kind):
                said.append(f"{sign} {_number(getattr(item, attr))}")
        if isinstance(item, annotated_types.MinLen):
            said.append(f"at least {item.min_length}")
        if (pattern := getattr(item, "pattern", None)) is not None:
            said.append(f"matching `{pattern}`")
    return ", ".join(said)


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no YAML for the default {value!r}")


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined or isinstance(value, BaseModel):
        return "—"
    return f"`{_yaml(value)}`"


def _row(key: str, field: FieldInfo) -> Row:
    if not field.description:
        raise ValueError(f"{key} has no description: give its field one (description=...) in reposwarm/contracts/")
    annotation, nullable = _optional(field.annotation)
    kind = _type_name(annotation)
    if limits := _constraints(field):
        kind = f"{kind} {limits}" if get_origin(annotation) is None else f"{kind}, {limits}"
    return Row(key, f"{kind}, or null" if nullable else kind, _default(field), field.description)


def config_rows(model: type[BaseModel] = LanesFile, prefix: str = "") -> Iterator[Row]:
    """Every key, in the models' order: a nested mapping's own row, then its keys."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield _row(key, field)
        annotation = field.annotation
        if (nested := _model_of(annotation)) is not None:
            yield from config_rows(nested, f"{key}.")
        elif get_origin(annotation) is dict and (entry := _model_of(get_args(annotation)[1])) is not None:
            if entry is CommandRule:  # written inside `commands`, as a mapping entry: {run: argv, when, shards}
                yield Row(f"{prefix}commands[].run", "list of strings", "required in a mapping entry",
                          "the command's argv, where a `commands` entry is a mapping")
                yield from config_rows(entry, f"{prefix}commands[].")
            else:
                yield from config_rows(entry, f"{key}.{PLACEHOLDERS[name]}.")


def config_table() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.meaning)} |" for r in config_rows()]
    return "\n".join(lines)


def env_tables() -> str:
    out = []
    for group in GROUPS:
        out += [f"**{group.title}**", "", "| variable | read by | default | meaning |", "|---|---|---|---|"]
        for v in group.variables:
            who = v.read_by if v.owner == REPOSWARM else f"{v.read_by} ({v.owner})"
            out.append(f"| `{v.name}` | {_cell(who)} | {_cell(v.default or '—')} | {_cell(v.meaning)} |")
        out.append("")
    return "\n".join(out).rstrip()


def reference() -> str:
    """The text between the markers."""
    from reposwarm.cli.common import LANES_FILE_NAMES, REPOSITORY_MAY_SET

    found = ", ".join(f"`{name}`" for name in LANES_FILE_NAMES)
    return "\n".join([
        "### Every key of the lanes file and the repository configuration",
        "",
        "One file shape for both: a lanes file (`--lanes FILE`) has at least one lane in `swarm.lanes`; a "
        "repository configuration (`--config FILE`, or the first of " + found + " at the repository's root) may "
        "have none, and the run proposes them. `<lane>`, `<profile>` and `<model>` stand for names you choose; a "
        "`commands` entry is an argv list or a mapping `{run: argv, when: [...], shards: N}`. An unknown key is "
        "refused, with the key it was probably meant to be.",
        "",
        config_table(),
        "",
        f"A file found in the repository is its author's, not yours: it may set {REPOSITORY_MAY_SET}. Anything "
        "else (`delivery`, a profile's `env`, `network`, `read_only_paths`, `setup`...) is refused, naming the "
        "key as written; give it in a file of your own (`--lanes FILE`, `--config FILE`).",
        "",
        "### Every environment variable",
        "",
        "What reposwarm reads, and what the libraries it connects with read (said in *read by*). The starter is "
        "`reposwarm run` and every command that starts a run; the CLI, every `reposwarm` command.",
        "",
        env_tables(),
    ])


def rewrite(page: str) -> str:
    """The page with its generated part replaced; markers missing or doubled are an error."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"the page needs exactly one {BEGIN!r} and, after it, one {END!r}")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{reference()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reposwarm.docs_reference", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs, rewrite nothing")
    parser.add_argument("--page", type=Path, default=PAGE, help=f"the page (default {PAGE})")
    args = parser.parse_args(argv)
    text = args.page.read_text(encoding="utf-8")
    new = rewrite(text)
    if args.check:
        if new != text:
            print(f"{args.page}: the generated reference is out of date: run python -m reposwarm.docs_reference",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.page.write_text(new, encoding="utf-8")
        print(f"rewrote the reference in {args.page}")
    else:
        print(f"{args.page}: the reference is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
