"""Run model-written Python under limits: the math agent's `execute_python_code` tool.

The tool stands in for agentscope's `execute_python_code`: same name, same arguments, the same
result text `<returncode>..</returncode><stdout>..</stdout><stderr>..</stderr>` (a timeout reads as
agentscope's does), so prompts and trained behaviour do not change. What changes is how the code runs.

Always, on any Linux machine:

* in a fresh temporary directory (its cwd, HOME and TMPDIR), deleted after the call;
* as `python -I -B`, with an environment of PATH, LANG, HOME, TMPDIR and one-thread BLAS settings
  only: none of the parent's variables (API keys, tokens) reach it;
* under rlimits, per process: CPU_SECONDS of CPU time, MEMORY_MIB of address space, FILE_SIZE_MIB
  per written file (stdout and stderr are files too), MAX_PROCESSES processes and threads; and
  within WALL_SECONDS (the tool's `timeout`) of wall time, after which it is killed;
* a limit it hits is named in a line appended to stderr; no exception reaches the agent.

Where the machine allows it (the first call tries the plans from most to least isolated and keeps
the first that runs Python; `enforced()` tells which):

* namespaces: an empty network namespace (no network, loopback included); a mount namespace in
  which every file system is read-only except the work dir and /proc is hidden (it shows other
  processes' command lines, and to the same user their environments); a PID namespace whose PID 1
  is the code's Python, so that when it ends the kernel kills and reaps everything it started,
  detached or not (a signal that Python sends itself without a handler is therefore ignored).
  A root parent needs CAP_SYS_ADMIN for these; another user, unprivileged user namespaces.
* a root parent runs the code as a uid of the call's own (1<<30 + pid*64 + slot, unused by real
  accounts), because the kernel never applies RLIMIT_NPROC to uid 0 and because that uid cannot
  write root's files. If it cannot read the interpreter (one under /root, say), it keeps
  CAP_DAC_READ_SEARCH: it may then read, never write, any file.

The process limit counts only the call's own processes with an own uid or inside a user namespace;
otherwise (a non-root parent without user namespaces) it counts all the user's processes.

Why one module: the plans, what the child does before it runs the code (namespaces, mounts, uid,
limits) and what the parent does after (the timer, the clean-up) are one security boundary, read
and reviewed together.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any, Iterator

import shortuuid
from agentscope.message import TextBlock
from agentscope.tool import Toolkit, ToolResponse
from agentscope.tool import execute_python_code as agentscope_execute_python_code

WALL_SECONDS = 10  # one runaway snippet costs one tool call, not the rollout
CPU_SECONDS = 10  # per process; ends the code even if the parent dies before its wall timer fires
MEMORY_MIB = 1024  # address space per process: numpy + sympy take ~120 MiB, torch ~600 MiB
FILE_SIZE_MIB = 16  # largest file it may write; stdout and stderr are files too, so output is capped
MAX_PROCESSES = 16  # processes and threads, the sandbox's own init process included

MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Limits:
    """One call's limits; the tool uses the module's constants, with `timeout` as wall_seconds."""

    wall_seconds: float = WALL_SECONDS
    cpu_seconds: int = CPU_SECONDS
    memory_mib: int = MEMORY_MIB
    file_size_mib: int = FILE_SIZE_MIB
    processes: int = MAX_PROCESSES


async def execute_python_code(code: str, timeout: float = WALL_SECONDS, **kwargs: Any) -> ToolResponse:
    """Run `code` in the sandbox with `timeout` seconds of wall time; other limits as in `Limits`.

    Extra keyword arguments are accepted and ignored, as agentscope's function does.
    """
    return await run(code, Limits(wall_seconds=timeout))


def tool_schema() -> dict:
    """The JSON schema agentscope builds for its own `execute_python_code`, for registering ours under."""
    toolkit = Toolkit()
    toolkit.register_tool_function(agentscope_execute_python_code)
    return toolkit.get_json_schemas()[0]


def enforced() -> dict[str, Any]:
    """What is enforced on this machine: the limits and which of the isolation measures work here."""
    plan = _plan()
    root = os.geteuid() == 0
    return {
        "wall_seconds": WALL_SECONDS,
        "cpu_seconds": CPU_SECONDS,
        "memory_mib": MEMORY_MIB,
        "file_size_mib": FILE_SIZE_MIB,
        "processes": MAX_PROCESSES if plan.own_uid or not root else None,  # None: root is exempt
        "process_limit_per_call": plan.own_uid or (plan.namespaces and not root),
        "clean_environment": True,
        "own_work_directory": True,
        "no_network": plan.namespaces,
        "read_only_outside_work_directory": plan.namespaces,
        "proc_hidden": plan.namespaces,
        "kills_detached_processes": plan.namespaces or plan.own_uid,
        "own_uid": plan.own_uid,
        "can_read_any_file": plan.read_all,
    }


async def run(code: str, limits: Limits = Limits()) -> ToolResponse:
    """Run `code` under `limits` with this machine's plan; the result reads as agentscope's does."""
    plan = _plan()
    timed_out = False
    with _workspace(plan, code) as (workdir, script, uid), tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        try:
            proc = await asyncio.create_subprocess_exec(
                *_argv(plan, script), **_popen_kwargs(plan, limits, workdir, uid, out, err))
        except (OSError, subprocess.SubprocessError) as error:
            return _response(1, "", f"The sandbox could not start Python: {error}")
        try:
            await asyncio.wait_for(proc.wait(), limits.wall_seconds)
        except asyncio.TimeoutError:
            timed_out = True
        finally:  # on cancellation too
            await _stop(plan, proc, uid)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", errors="replace")
        stderr = err.read().decode("utf-8", errors="replace")
    notes = _limit_notes(proc.returncode, stderr, timed_out, limits, plan)
    if timed_out:  # agentscope's own words and returncode for a timeout
        notes.append("TimeoutError: The code execution exceeded the timeout of "
                     f"{limits.wall_seconds} seconds.")
    for note in notes:
        stderr = f"{stderr}\n{note}" if stderr else note
    return _response(-1 if timed_out else proc.returncode, stdout, stderr)


def _response(returncode: int, stdout: str, stderr: str) -> ToolResponse:
    text = f"<returncode>{returncode}</returncode><stdout>{stdout}</stdout><stderr>{stderr}</stderr>"
    return ToolResponse(content=[TextBlock(type="text", text=text)])


def _limit_notes(returncode: int, stderr: str, timed_out: bool, limits: Limits, plan: _Plan) -> list[str]:
    """One line per limit the code evidently hit, judged from its exit and Python's error messages."""
    notes = []
    if returncode == -signal.SIGKILL and not timed_out:  # the hard RLIMIT_CPU sends SIGKILL
        notes.append(f"The code was killed: it used up its CPU time limit of {limits.cpu_seconds} s.")
    if "MemoryError" in stderr or "[Errno 12] Cannot allocate memory" in stderr:
        notes.append(f"The code exceeded its memory limit of {limits.memory_mib} MiB.")
    if "[Errno 27] File too large" in stderr or returncode == -signal.SIGXFSZ:
        notes.append(f"The code exceeded the file size limit of {limits.file_size_mib} MiB "
                     "(it applies to stdout and stderr too).")
    if "[Errno 11] Resource temporarily unavailable" in stderr or "can't start new thread" in stderr:
        notes.append(f"The code reached its limit of {limits.processes} processes and threads.")
    if plan.namespaces and "[Errno 101] Network is unreachable" in stderr:
        notes.append("The code has no network access.")
    return notes


# --- the plan: which isolation measures this machine supports --------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    namespaces: bool  # network, mount (read-only) and PID namespaces
    own_uid: bool  # root parent: run as a uid of the call's own
    read_all: bool  # ... keeping CAP_DAC_READ_SEARCH, for an interpreter that uid cannot read


@functools.cache
def _plan() -> _Plan:
    """The most isolated plan that runs Python here, found once per process by trying them in turn."""
    if os.geteuid() == 0:
        plans = [_Plan(ns, True, read_all) for ns in (True, False) for read_all in (False, True)]
        plans.append(_Plan(False, False, False))
    else:
        plans = [_Plan(True, False, False), _Plan(False, False, False)]
    for plan in plans:
        if _runs_python(plan):
            return plan
    raise RuntimeError("the sandbox cannot start Python on this machine")


# Lists every directory on sys.path: an interpreter or site-packages the code's user can't read fails.
_PROBE = """
import os, sys
for path in sys.path:
    try:
        os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
print("ok")
"""


def _runs_python(plan: _Plan) -> bool:
    with _workspace(plan, _PROBE) as (workdir, script, uid), tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.run(_argv(plan, script), timeout=60,
                                  **_popen_kwargs(plan, Limits(), workdir, uid, out, subprocess.DEVNULL))
        except (OSError, subprocess.SubprocessError):
            return False
        out.seek(0)
        return proc.returncode == 0 and out.read() == b"ok\n"


# --- one call: work dir, uid, command line, cleanup -----------------------------------------------

_UID_BASE = 1 << 30
_UIDS_PER_PROCESS = 64  # pids are below 1 << 22, so these uids stay below 1 << 31
_uids_in_use: set[int] = set()
_uids_lock = threading.Lock()


@contextlib.contextmanager
def _workspace(plan: _Plan, code: str) -> Iterator[tuple[str, str, int | None]]:
    """A fresh work dir, the script's name in it, and for a root parent a uid no other live call has."""
    uid = None
    if plan.own_uid:
        with _uids_lock:
            first = _UID_BASE + os.getpid() * _UIDS_PER_PROCESS
            uid = next((u for u in range(first, first + _UIDS_PER_PROCESS) if u not in _uids_in_use), None)
            if uid is None:
                raise RuntimeError(f"more than {_UIDS_PER_PROCESS} sandboxed calls at once in one process")
            _uids_in_use.add(uid)
    workdir = tempfile.mkdtemp()
    try:
        script = f"tmp_{shortuuid.uuid()}.py"  # agentscope's name, so tracebacks look alike
        with open(os.path.join(workdir, script), "w", encoding="utf-8") as f:
            f.write(code)
        if uid is not None:
            # Writable through its group; root keeps the ownership, so the code cannot rename the dir
            # or swap a symlink in for it before the cleanup below.
            os.chown(workdir, 0, uid)
            os.chmod(workdir, 0o1770)
            os.chown(os.path.join(workdir, script), uid, uid)
        yield workdir, script, uid
    finally:
        _remove(workdir)
        if uid is not None:
            with _uids_lock:
                _uids_in_use.discard(uid)


def _remove(path: str) -> None:
    """Delete the work dir, first giving back the owner rights the code may have taken from its dirs."""
    if os.path.islink(path) or not os.path.isdir(path):  # never chmod through a link
        return
    os.chmod(path, 0o700)
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o700)
    shutil.rmtree(path, ignore_errors=True)


# The namespace plans start this small init first: it is the parent of the code's Python, which is
# PID 1 of a new PID namespace, so when that Python ends the kernel kills and reaps everything it
# started. SIGTERM makes the init kill it; the init exits the way its child did.
_INIT = """
import ctypes, os, signal, sys
child = os.fork()
if child == 0:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the init
    os.execv(sys.executable, sys.argv[1:])
signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGKILL))
code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
if code < 0:
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _argv(plan: _Plan, script: str) -> list[str]:
    # -X utf8 stands in for agentscope's PYTHONUTF8/PYTHONIOENCODING, which -I ignores. The script is
    # named relative to the cwd: a root parent's uid may be unable to walk the path down to it.
    python = [sys.executable, "-I", "-B", "-X", "utf8", "-u", script]
    return ([sys.executable, "-I", "-S", "-B", "-c", _INIT] if plan.namespaces else []) + python


def _popen_kwargs(plan: _Plan, limits: Limits, workdir: str, uid: int | None, stdout, stderr) -> dict:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
           # one BLAS thread: threads count as processes, and each one's buffers as address space
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return {"cwd": workdir, "env": env, "stdin": subprocess.DEVNULL, "stdout": stdout, "stderr": stderr,
            "start_new_session": True, "preexec_fn": functools.partial(_enter_sandbox, plan, limits, uid)}


async def _stop(plan: _Plan, proc: asyncio.subprocess.Process, uid: int | None) -> None:
    """Leave nothing of the call running, and reap its first process."""
    if plan.namespaces:
        # Once the code's Python (PID 1 of its namespace) has ended, the kernel has killed and reaped
        # all the rest. Until then, the init kills it on SIGTERM; if the init doesn't, SIGKILL the group.
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                _kill_group(proc.pid)
    else:
        _kill_leftovers(proc.pid, uid)
    await proc.wait()


def _kill_leftovers(pid: int, uid: int | None) -> None:
    """Without a PID namespace: kill what the code left running (its own uid's processes, or its group)."""
    if uid is None:
        _kill_group(pid)
        return
    if uid < _UID_BASE:  # kill -1 reaches every process of the uid it runs as: never anyone else's
        raise ValueError(f"not a sandbox uid: {uid}")
    subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=uid, group=uid, extra_groups=[], env={},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_group(pid: int) -> None:
    # After the group leader is reaped its id can only be reused once the group is empty, and an
    # empty group has nothing left to kill.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# --- between fork and exec: namespaces, limits, user ------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 0x4000, 1 << 18
_AT_FDCWD, _AT_RECURSIVE, _OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH = -100, 0x8000, 1, 4
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # the same on every architecture
_PR_SET_PDEATHSIG, _PR_SET_KEEPCAPS, _PR_SET_NO_NEW_PRIVS = 1, 8, 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2
_CAP_DAC_READ_SEARCH, _LINUX_CAPABILITY_VERSION_3 = 2, 0x20080522


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


_READ_ONLY = _MountAttr(attr_set=1)  # MOUNT_ATTR_RDONLY


def _check(result: int) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def _enter_sandbox(plan: _Plan, limits: Limits, uid: int | None) -> None:
    """Runs in the child as the parent's user, before exec, so every limit binds before the code starts.

    Only system calls here: a preexec_fn must not take locks another thread of the parent may hold.
    """
    if plan.namespaces:
        user_ns = 0 if os.geteuid() == 0 else _CLONE_NEWUSER
        _check(_libc.unshare(user_ns | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID))
        _read_only_but_cwd()
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))  # no setuid binary gives anything back
    if uid is not None:
        _become(uid, plan.read_all)
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))  # the code dies with the parent
    # Last: this copy of the parent may already map more than the address-space limit, so nothing
    # may allocate after it. After the user namespace, so that RLIMIT_NPROC counts only the
    # processes inside it.
    for which, value in ((resource.RLIMIT_CPU, limits.cpu_seconds),  # soft = hard: SIGKILL, no core dump
                         (resource.RLIMIT_FSIZE, limits.file_size_mib * MIB),
                         (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NPROC, limits.processes),
                         (resource.RLIMIT_AS, limits.memory_mib * MIB)):
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def _read_only_but_cwd() -> None:
    """In the new mount namespace: all file systems read-only, /proc hidden, the cwd still writable."""
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None))  # nothing below reaches the parent
    workdir = _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, b".", _OPEN_TREE_CLONE | os.O_CLOEXEC))
    _check(_libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE,
                         ctypes.byref(_READ_ONLY), ctypes.sizeof(_READ_ONLY)))
    _check(_libc.mount(b"none", b"/proc", b"tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None))
    # The writable copy of the work dir, taken before the line above made "/" read-only, goes back on top.
    _check(_libc.syscall(_SYS_MOVE_MOUNT, workdir, b"", _AT_FDCWD, b".", _MOVE_MOUNT_F_EMPTY_PATH))
    os.fchdir(workdir)


def _become(uid: int, read_all: bool) -> None:
    os.setgroups([])
    os.setgid(uid)
    if not read_all:
        os.setuid(uid)
        return
    _check(_libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0))  # keep the permitted set across setuid, then trim it
    os.setuid(uid)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    bit = 1 << _CAP_DAC_READ_SEARCH
    data = (ctypes.c_uint32 * 6)(bit, bit, bit, 0, 0, 0)  # effective, permitted, inheritable; caps 32-63
    _check(_libc.capset(header, data))
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH, 0, 0))  # kept by exec
