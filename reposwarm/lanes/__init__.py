"""The lanes file and the repository's configuration: loading, checking, proposal guardrails, the proposal as a file."""
