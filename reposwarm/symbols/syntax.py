"""Does a file still parse? Asked of every conflict resolution before it is accepted.

Uses the tree-sitter grammars that ship in the per-language wheels (no download
at run time). Languages without a grammar here are not judged (None).
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import PurePosixPath

_GRAMMARS = {  # extension -> (module, function returning the language)
    ".py": ("tree_sitter_python", "language"),
    ".go": ("tree_sitter_go", "language"),
    ".js": ("tree_sitter_javascript", "language"),
    ".mjs": ("tree_sitter_javascript", "language"),
    ".cjs": ("tree_sitter_javascript", "language"),
    ".jsx": ("tree_sitter_javascript", "language"),
    ".ts": ("tree_sitter_typescript", "language_typescript"),
    ".tsx": ("tree_sitter_typescript", "language_tsx"),
    ".java": ("tree_sitter_java", "language"),
    ".rs": ("tree_sitter_rust", "language"),
}
MARKERS = ("<<<<<<< ", "=======", ">>>>>>> ", "||||||| ")


@lru_cache(maxsize=16)
def _parser(suffix: str):  # type: ignore[no-untyped-def]
    import tree_sitter

    module_name, fn = _GRAMMARS[suffix]
    module = importlib.import_module(module_name)
    return tree_sitter.Parser(tree_sitter.Language(getattr(module, fn)()))


def parses(path: str, text: str) -> bool | None:
    """True or False for languages with a grammar here; None when this file's language is not known."""
    suffix = PurePosixPath(path).suffix
    if suffix not in _GRAMMARS:
        return None
    try:
        parser = _parser(suffix)
    except ImportError:
        return None
    return not parser.parse(text.encode("utf-8")).root_node.has_error


def has_conflict_markers(text: str) -> bool:
    return any(line.startswith(MARKERS) or line == "=======" for line in text.splitlines())
