"""The GPUs' utilization and memory while a run trains, sampled by nvidia-smi into the run's folder, for the step
timeline (scripts/step_timeline.py).

nvidia-smi rather than torch or NVML's Python bindings: the launcher opens no CUDA context on a GPU the run
needs, and there is nothing to install. A daemon thread of the launcher asks it once per sample, so the
sampling ends with the launcher however that ends, and a Ctrl-C meant for the run does not reach it. Its
`utilization.gpu` is the share of the driver's last sample period in which a kernel ran. One line per GPU
and sample, the time in seconds since the epoch:

    1796486897.52,0,87,61234
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

FILE_NAME = "gpu_samples.csv"
INTERVAL_S = 0.5
QUERY = "index,utilization.gpu,memory.used"


class Sample(NamedTuple):
    at: float  # seconds since the epoch
    gpu: int  # nvidia-smi's index
    utilization: float  # percent of the sample period with a kernel running
    memory_mib: float


def _sample_until(stop: threading.Event, path: Path, command: list[str], interval_s: float) -> None:
    with open(path, "a", encoding="utf-8") as out:
        while not stop.is_set():
            at = time.time()
            try:
                found = subprocess.run(command, capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                found = None
            if found is not None and found.returncode == 0:
                out.write("".join(f"{at:.2f},{line}\n" for line in found.stdout.splitlines() if line.strip()))
                out.flush()
            stop.wait(max(0.0, interval_s - (time.time() - at)))


@contextlib.contextmanager
def sampled(job_dir: str | os.PathLike, interval_s: float = INTERVAL_S):
    """While the block runs, a line per visible GPU every `interval_s` in `job_dir/FILE_NAME` (a resumed run adds
    to its file); nothing where nvidia-smi is missing."""
    if shutil.which("nvidia-smi") is None:
        yield None
        return
    path = Path(job_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    command = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
               *(["-i", visible] if visible else [])]
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_until, args=(stop, path, command, interval_s),
                               name="rftkit-gpu-samples", daemon=True)
    sampler.start()
    try:
        yield path
    finally:
        stop.set()
        sampler.join(timeout=15)


def read(path: str | os.PathLike) -> list[Sample]:
    """The samples in a file `sampled` wrote, in the order written; lines it cannot read (one cut off by a
    kill, nvidia-smi's [N/A]) are skipped."""
    samples = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            at, gpu, utilization, memory = (field.strip() for field in line.split(","))
            samples.append(Sample(float(at), int(gpu), float(utilization), float(memory)))
        except ValueError:
            continue
    return samples


def idle_share(utilizations: list[float]) -> float | None:
    """The share of samples at 0% utilization: the time the GPU did nothing at all (None without samples)."""
    return sum(u == 0 for u in utilizations) / len(utilizations) if utilizations else None
