"""The house: its rooms and floors, read from the code's own imports (tests/importgraph.py, over `ast`): no circle
between rooms, few imports that climb back up a floor and each with its reason, no product module named like a
test, and a map in docs/internals.md that names every module there is."""

from __future__ import annotations

import re

from tests import importgraph

MAX_UPWARD = 4
INTERNALS = importgraph.ROOT / "docs" / "internals.md"


def test_no_circle_between_rooms() -> None:
    found = list(importgraph.imports())
    assert importgraph.circles(importgraph.room_graph(found)) == []


def test_every_room_has_a_floor() -> None:
    rooms = {importgraph.room(m) for m in importgraph.modules()}
    for name in rooms:
        importgraph.floor(name)  # KeyError names a room no floor holds


def test_few_imports_climb_back_up_and_each_says_why() -> None:
    up = importgraph.upward(list(importgraph.imports()))
    distinct = {(imp.source, imp.target) for imp in up}
    assert len(distinct) <= MAX_UPWARD, sorted(distinct)
    assert all(imp.comment for imp in up), [f"{imp.source}:{imp.line}" for imp in up if not imp.comment]


def test_no_product_module_reads_as_a_test() -> None:
    assert importgraph.test_modules() == []


def test_the_internals_map_names_every_module() -> None:
    text = INTERNALS.read_text()
    named = set(re.findall(r"`((?:reposwarm|workflows|activities)/[\w/]+\.py|worker\.py|starter\.py)`", text))
    tree = {str(path.relative_to(importgraph.ROOT)) for path in importgraph.modules().values()
            if path.name != "__init__.py"}
    assert not tree - named, f"modules docs/internals.md's map leaves out: {sorted(tree - named)}"
    assert not named - tree, f"docs/internals.md names modules that are not there: {sorted(named - tree)}"
