"""The real coding-agent CLIs a lane may run (issue 47): Claude Code and Codex, found (clis.py), driven headless
against a model API we choose (claude_code.py, codex.py), one session at a time, optionally inside the checks'
bubblewrap sandbox with only a bridge to that API as its network (session.py, bridge.py)."""
