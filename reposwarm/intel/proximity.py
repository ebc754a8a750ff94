"""The order of a name's references in a lookup: those in a file defining it first, then by how deep a folder they
share with a definition (symbol_lookup shows the nearest uses of a name before the far ones)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reposwarm.intel.symbols import Definition, Reference


def proximity(defs: list[Definition]) -> Callable[[Reference], tuple[int, str, int]]:
    """Sort key of references: in a defining file first, then by how deep a folder they share with one."""
    files = {d.path for d in defs}
    depth: dict[str, int] = {}
    for d in defs:
        parts = d.path.split("/")
        for i in range(len(parts)):
            depth.setdefault("/".join(parts[:i]), i)

    def key(ref: Reference) -> tuple[int, str, int]:
        if ref.path in files:
            return (-1_000, ref.path, ref.line)
        parts = ref.path.split("/")[:-1]
        shared = next((depth[f] for i in range(len(parts), -1, -1) if (f := "/".join(parts[:i])) in depth), -1)
        return (-shared, ref.path, ref.line)

    return key
