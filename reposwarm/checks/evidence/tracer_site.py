# mypy: ignore-errors
# ruff: noqa
# The import tracer of a check's Python interpreters (reposwarm/checks/evidence/python.py): copied as
# `sitecustomize.py` into a folder first on the command's PYTHONPATH, with `_REPOSWARM_EVIDENCE` set above this
# text. Every interpreter the check starts (pytest, its xdist workers, subprocesses) then writes, when it ends, one
# JSON file: each module it loaded, and the file it loaded it from. Imported any other way (no
# `_REPOSWARM_EVIDENCE`) it does nothing.
#
# Rules: it must never change what the program does. So everything is in try/except; it takes itself off sys.path
# (its folder holds nothing else); another `sitecustomize` further on sys.path (a venv's, the distribution's) is
# run after it, as Python would have run it; its work is at exit (sys.modules read once), plus, on Python 3.12+
# and only for the changed files' lines, sys.monitoring events that switch themselves off after their first hit.
# Written for every Python a check may run, 2.7 to 3.13: no f-strings, no annotations.
import sys


def _reposwarm_evidence_start():
    import os

    config = globals().get("_REPOSWARM_EVIDENCE")
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    except Exception:
        pass
    # The unsandboxed supervisor of a check (reposwarm/checks/sandbox/process.py) is reposwarm's, not the check's.
    if not isinstance(config, dict) or "REPOSWARM_SUPERVISOR_NICE" in os.environ:
        return
    out = config.get("out")
    started_in = os.getcwd()
    stdlib = os.path.dirname(os.__file__) + os.sep
    state = {"done": None}
    hits = set()

    def path_of(module):
        try:
            space = module.__dict__
        except Exception:
            return None
        found = space.get("__file__")
        if not isinstance(found, str):
            spec = space.get("__spec__")
            found = getattr(spec, "origin", None)
            if not isinstance(found, str) or not os.path.isabs(found):
                return None
        if not os.path.isabs(found):
            found = os.path.join(started_in, found)
        return os.path.normpath(found)

    def write(how):
        try:
            pid = os.getpid()
            if state["done"] == pid:
                return
            state["done"] = pid
            modules = {}
            for name, module in list(sys.modules.items()):
                found = path_of(module)
                if found is None or found.startswith(here + os.sep):
                    continue
                if found.startswith(stdlib) and "-packages" not in found and name != "unittest":
                    continue  # the standard library: never a tree's code (unittest: the runner, said)
                modules[name] = found
            lines = {}
            for filename, line in list(hits):
                lines.setdefault(filename, []).append(line)
            record = {"v": 1, "pid": pid, "how": how, "argv": [str(a)[:300] for a in sys.argv[:12]],
                      "executable": sys.executable, "version": sys.version.split()[0],
                      "path": [str(p) for p in sys.path[:64]], "modules": modules, "lines": lines,
                      "monitored": bool(state.get("monitored"))}
            import json
            import random
            import time

            name = "py-%d-%d-%06x" % (pid, int(time.time() * 1000), random.getrandbits(24))
            target = os.path.join(out, name + ".json")
            handle = open(target + ".tmp", "w")
            try:
                handle.write(json.dumps(record))
            finally:
                handle.close()
            os.rename(target + ".tmp", target)
        except Exception:
            pass

    try:
        import atexit

        atexit.register(write, "exit")
        # A process that ends through os._exit (a forked child of multiprocessing, pytest-forked, a test that
        # exits hard) runs no atexit handler: it writes first. (A forked child inherits the handler above and
        # writes under its own pid.)
        real_exit = os._exit

        def _exit(code):
            write("_exit")
            real_exit(code)

        _exit.__doc__ = real_exit.__doc__
        os._exit = _exit
    except Exception:
        pass
    lines = config.get("lines") or {}
    monitoring = getattr(sys, "monitoring", None)
    if lines and monitoring is not None:
        try:
            _reposwarm_lines(monitoring, lines, hits)
            state["monitored"] = True
        except Exception:
            pass


def _reposwarm_lines(monitoring, wanted, hits):
    """Python 3.12+: which of the changed lines ran. A code object starts once per location (PY_START, then
    disabled there); only the changed files' code objects get LINE events, each disabled after its first hit."""
    import os

    tool = 4  # a free tool id (0 debugger, 1 coverage, 2 profiler, 5 optimizer)
    monitoring.use_tool_id(tool, "reposwarm-evidence")
    wanted = dict((os.path.normpath(f), set(ls)) for f, ls in wanted.items())
    known = {}
    events = monitoring.events
    disable = monitoring.DISABLE

    def on_start(code, offset):
        name = code.co_filename
        mine = known.get(name)
        if mine is None:
            mine = known[name] = os.path.normpath(os.path.abspath(name))
        if mine in wanted:
            monitoring.set_local_events(tool, code, events.LINE)
        return disable

    def on_line(code, line):
        mine = known.get(code.co_filename, code.co_filename)
        if line in wanted.get(mine, ()):
            hits.add((mine, line))
        return disable

    monitoring.register_callback(tool, events.PY_START, on_start)
    monitoring.register_callback(tool, events.LINE, on_line)
    monitoring.set_events(tool, events.PY_START)


def _reposwarm_chain():
    """Run the `sitecustomize` Python would have found without this one (after it on sys.path). Its errors are
    its own: they reach site.py as they would have."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if sys.version_info[0] < 3:
        import imp

        try:
            found = imp.find_module("sitecustomize", rest)
        except ImportError:
            return
        try:
            sys.modules["sitecustomize"] = imp.load_module("sitecustomize", *found)
        finally:
            if found[0]:
                found[0].close()
        return
    import importlib.machinery

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    import importlib.util

    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _reposwarm_evidence_start()
except Exception:
    pass
if globals().get("_REPOSWARM_EVIDENCE") is not None:
    _reposwarm_chain()
