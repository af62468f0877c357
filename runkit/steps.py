"""One step of a script (a launch, an evaluation, a data script) run as a subprocess: in a session of
its own, its output to a log file, a progress line every PROGRESS_S, and stopped at its time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from rftkit.example import REPO  # the checkout's root
PROGRESS_S = 30  # seconds between progress lines
INTERRUPT_GRACE_S = (45, 60)  # seconds after the first and the second SIGINT
STOP_POLL_S = 0.5  # seconds between two looks of a stop_when condition


@dataclass
class Step:
    code: int | None  # exit code; None when it was killed
    seconds: float
    interrupted: bool = False  # stopped at its time limit as Ctrl-C would (on_timeout="interrupt")


def run_step(command: list[str], log_file: Path, *, label: str = "", timeout: float | None = None,
             on_timeout: Literal["kill", "interrupt"] = "kill", check: bool = False, env: dict | None = None,
             stop_when: Callable[[], bool] | None = None, on_stop: Literal["kill", "interrupt"] = "kill") -> Step:
    """Run `command` from the repo, its output to `log_file`, printing `[HH:MM:SS] <label> <elapsed> s:
    <the log's last line>` every PROGRESS_S.

    Past `timeout` seconds: "kill" kills its session and the Ray head (kill()); "interrupt" stops it
    as Ctrl-C would (interrupt()), then waits for the GPUs to be free: a training run whose last
    checkpoint is the result. `stop_when`, looked at every STOP_POLL_S, stops it as soon as it is true,
    as `on_stop` says (the same two ways). Ctrl-C here is passed on to the step. `check`: a non-zero exit
    (other than at an interrupt) stops the script with the log's end."""
    log(f"$ {' '.join(command[1:])}  (log: {log_file})")
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    next_progress = started + PROGRESS_S
    interrupted = False
    with open(log_file, "w") as out:
        # its own session, so that interrupt() and kill() reach all of it; Ctrl-C here is passed on below
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True, preexec_fn=hear_sigint)
        try:
            while True:
                now = time.monotonic()
                wake = min(t for t in (next_progress, deadline, now + STOP_POLL_S if stop_when else None)
                           if t is not None)
                try:
                    code = process.wait(timeout=max(0.0, wake - now))
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if stop_when is not None and stop_when():
                    code, interrupted = stop(process, on_stop, f"{label or 'the step'}: its moment came")
                    break
                if deadline is not None and now >= deadline:
                    code, interrupted = stop(process, on_timeout, f"{label or 'the step'}: {timeout:g} s passed")
                    break
                if now >= next_progress:
                    log(f"{label + ' ' if label else ''}{now - started:4.0f} s: {last_line(log_file)}")
                    next_progress += PROGRESS_S
        except KeyboardInterrupt:
            interrupt(process)
            raise
    if check and code != 0 and not interrupted:
        raise SystemExit(f"error: exit code {code}; the end of {log_file}:\n{tail(log_file)}")
    return Step(code, time.monotonic() - started, interrupted)


def stop(process: subprocess.Popen, how: Literal["kill", "interrupt"], why: str) -> tuple[int | None, bool]:
    """Stop a running step `how` run_step's caller asked: (its exit code, None if killed; whether interrupted)."""
    if how == "interrupt":
        log(f"{why}, interrupting it")
        interrupt(process)
        wait_for_free_gpus()
        return process.returncode, True
    kill(process)
    return None, False


def hear_sigint() -> None:
    """Run in a step's process before it starts: SIGINT back to its default action.

    A background job of a non-interactive shell (`setsid nohup python3 -m experiments... &`, as on the
    GPU machine) starts with SIGINT ignored, and every process below it inherits that, so a
    Python step would install no KeyboardInterrupt handler and the time limit's SIGINT would do
    nothing. With the default action restored, Python handles it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(process: subprocess.Popen) -> None:
    """SIGINT, then SIGINT again (INTERRUPT_GRACE_S apart), as Ctrl-C would: a launch stops the Ray head
    it started (its actors with it, which frees the GPUs) and exits. If it still runs, kill()."""
    sent = time.monotonic()
    for grace in INTERRUPT_GRACE_S:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=grace)
            # the launcher exits 130 after a clean stop; this line is the record that it did
            log(f"the run ended {time.monotonic() - sent:.0f} s after the first SIGINT, exit code {process.returncode}")
            return
        except subprocess.TimeoutExpired:
            log(f"still running {grace} s after a SIGINT")
    kill(process)


def kill(process: subprocess.Popen) -> None:
    """Kill a step started in its own session, and the Ray head it started.

    Killed, a launch cannot stop that head itself (one that ends does, and leaves alone a
    cluster it found running)."""
    from rftkit import cluster  # looked up on the module, so that a test can replace ray_cli

    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    cluster.ray_cli("stop", "--force")


def gpu_processes() -> list[str]:
    """'PID, NAME' of each process holding GPU memory, as nvidia-smi lists them."""
    try:
        listing = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                                 capture_output=True, text=True)
    except FileNotFoundError:  # no NVIDIA driver tools: nothing to wait for
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.strip()]


def wait_for_free_gpus(timeout: float = 120, interval: float = 3,
                       processes: Callable[[], list[str]] | None = None) -> bool:
    """After a stopped run: wait until its Ray workers and vLLM engine have let go of the GPUs.

    What follows (an evaluation's vLLM server, a relaunch) needs the memory back. True if the GPUs
    were freed in time; otherwise a warning names what still holds them."""
    processes = processes or gpu_processes
    deadline = time.monotonic() + timeout
    while held := processes():
        if time.monotonic() > deadline:
            log(f"warning: after {timeout:g} s these still hold GPU memory: {'; '.join(held)}")
            return False
        time.sleep(interval)
    return True


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def last_line(log_file: Path) -> str:
    lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:150] if lines else ""
