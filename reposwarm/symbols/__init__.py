"""The symbol index: definitions and references by tree-sitter, and whether a file parses."""
