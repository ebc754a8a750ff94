"""The error every layer raises for a configuration problem: the lanes file, the repository's configuration, an
environment variable or an object store's address. Phrased for the user; the command line prints it as it is."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration problem, phrased for the user."""
