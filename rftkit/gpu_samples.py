"""The GPUs' utilization and memory while a run trains, sampled by nvidia-smi into the run's folder, for the step
timeline (scripts/step_timeline.py).

nvidia-smi rather than torch or NVML's Python bindings: the launcher opens no CUDA context on a GPU the run
needs, and there is nothing to install. Its `utilization.gpu` is the share of the last sample period in which
a kernel ran. It writes its timestamps in the machine's local time, so the file's first line records that
time's offset from UTC: a report read on another machine places the samples right.

    # utc_offset_s=0
    2026/12/05 16:09:57.123, 0, 87, 61234
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

FILE_NAME = "gpu_samples.csv"
INTERVAL_MS = 500
QUERY = "timestamp,index,utilization.gpu,memory.used"
OFFSET_PREFIX = "# utc_offset_s="


class Sample(NamedTuple):
    at: float  # seconds since the epoch
    gpu: int  # nvidia-smi's index
    utilization: float  # percent of the sample period with a kernel running
    memory_mib: float


@contextlib.contextmanager
def sampled(job_dir: str | os.PathLike, interval_ms: int = INTERVAL_MS):
    """While the block runs, nvidia-smi appends a line per visible GPU every `interval_ms` to
    `job_dir/FILE_NAME` (a resumed run adds to its file); nothing where nvidia-smi is missing."""
    if shutil.which("nvidia-smi") is None:
        yield None
        return
    path = Path(job_dir) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{OFFSET_PREFIX}{round(time.localtime().tm_gmtoff)}\n")
        out.flush()
        command = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={interval_ms}",
                   *(["-i", visible] if visible else [])]
        sampler = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        try:
            yield path
        finally:
            sampler.terminate()
            try:
                sampler.wait(timeout=5)
            except subprocess.TimeoutExpired:
                sampler.kill()


def read(path: str | os.PathLike) -> list[Sample]:
    """The samples in a file `sampled` wrote, in the order written; lines it cannot read (a sampler cut off
    mid-line, nvidia-smi's [N/A]) are skipped."""
    samples, offset = [], 0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith(OFFSET_PREFIX):
            offset = int(line[len(OFFSET_PREFIX):])
            continue
        fields = [field.strip() for field in line.split(",")]
        try:
            stamp = datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
            samples.append(Sample(stamp.timestamp() - offset, int(fields[1]), float(fields[2]), float(fields[3])))
        except (ValueError, IndexError):
            continue
    return samples
