"""Launch commands run as `python SCRIPT ARGS...` would run them, in a child forked from a process that has
already imported the launch's libraries (agentscope, Trinity-RFT, torch: seconds in every new interpreter).

Python's own fork server (`multiprocessing`'s "forkserver" start method) imports PRELOAD once, in a process
that starts no threads, and forks one child per command. The child takes the command's environment, working
folder, argv and path as a new interpreter would, and runs the script as __main__: its exit code, output and
errors are what the tests read. What a fresh interpreter would do differently is import those libraries
before the environment is set: a test whose command's environment changes what they do at import runs
it with `subprocess` instead.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

from rftkit.example import REPO

PRELOAD = ["rftkit.launch", "rftkit.trinity_config", "rftkit.trinity_plugins.resumable_bots",
           "trinity.common.config_validator", "frozenlake.workflow", "math_bots.workflow", "math_bots.judge"]
_context = None


def _forks():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(command: list[str], env: dict, cwd: str, out: str, err: str) -> None:
    for fd, path in ((1, out), (2, err)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file, fd)
        os.close(file)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    script = Path(command[1])
    sys.argv = command[1:]
    # what `python SCRIPT` puts on the path: the script's folder first, then PYTHONPATH's entries
    extra = [str((Path(cwd) / script).parent), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    sys.path[:0] = [entry for entry in extra if entry not in sys.path]
    runpy.run_path(str(script), run_name="__main__")


def run(command: list[str], env: dict | None = None, cwd: Path = REPO,
        timeout: float = 300) -> subprocess.CompletedProcess:
    """[sys.executable, script, *args] run from `cwd` in `env` (this process's by default); any other command
    in a subprocess."""
    env = dict(os.environ if env is None else env)
    if command[0] != sys.executable or not command[1].endswith(".py"):
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="launch-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        child = _forks().Process(target=_child, args=(command, env, str(cwd), str(out), str(err)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(command, timeout)
        return subprocess.CompletedProcess(command, child.exitcode, out.read_text(), err.read_text())
