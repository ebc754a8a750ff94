"""reposwarm's command line (`python starter.py COMMAND`): main.py wires the commands; runs.py holds the run
commands (run, watch, status, review, approve, reject, list, demo); host.py the host-local ones (report, explain,
recording, gc, trial, mcp); common.py what they share. Nothing in the library imports this package."""
