"""A fixture stand-in for a BOTS launch, for rehearsing tests/gpu/kill_anywhere.py on a CPU: it writes what a
launch writes that the kill test reads, in the same order, and resumes as a launch does.

    python tests/fixture_bots_run.py CHECKPOINTS STEPS

Before it starts, `rftkit.checkpoints.fall_back` sets a torn named checkpoint aside, as before every launch.
Then, from the newest checkpoint T (0: none), each step n: the explorer's log line, its selector state
(`explorer_meta.json` and the per-step copy), the trainer's log line, and a checkpoint written in place, part
by part, with the tracker naming it last. A resumed run first prints the digest of the posteriors saved at
T, and its trainer's log says which checkpoint it loaded. Each step's posteriors are a function of n.
A SIGINT is answered as the launcher answers Ctrl-C during a save: the step under way is finished, its
checkpoint named, and the run exits 130 naming it. With STEPS_AFTER_CTRL_C=N in the environment it trains N
more steps first, as a trainer may finish the step it has begun.
"""

import json
import os
import signal
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rftkit.checkpoints import TRACKER, fall_back, tracker_step  # noqa: E402
from rftkit.trinity_plugins.digest import RESTORED, posterior_digest  # noqa: E402

PART_S = 0.25  # seconds each checkpoint part takes: long enough for a poll every 0.5 s to see a save under way


def posteriors(step: int) -> dict:
    return {"alphas": [step + 1, 1], "betas": [1, step + 2]}


def main(checkpoints: Path, steps: int) -> None:
    job = checkpoints / "AgentScope" / "bots-run"
    (job / "log").mkdir(parents=True, exist_ok=True)
    if said := fall_back(job):
        print(said, flush=True)
    start = tracker_step(job) or 0
    interrupted = []
    steps_after_ctrl_c = int(os.environ.get("STEPS_AFTER_CTRL_C", "0"))

    def on_sigint(signum, frame):
        interrupted.append(signum)
        print("interrupted during a checkpoint save: waiting for it to finish", file=sys.stderr, flush=True)

    signal.signal(signal.SIGINT, on_sigint)
    with open(job / "log" / "trainer.log", "a", buffering=1) as log:  # a line at a time, as a live log
        if start:
            print(f"resuming from the trainer's checkpoint at step {start}", flush=True)
            print(f"{RESTORED} the posteriors of 2 tasks at index {start} (digest "
                  f"{posterior_digest(**posteriors(start))})", flush=True)
            log.write(f"INFO Load from checkpoint folder: {job}/global_step_{start}\n")
        for step in range(start + 1, steps + 1):
            log.write(f"INFO Explore step {step} started.\n")
            state = json.dumps({"latest_iteration": step, "taskset_states": [posteriors(step)]})
            (job / f"explorer_meta.step_{step}.json").write_text(state)
            (job / "explorer_meta.json").write_text(state)
            time.sleep(PART_S)
            log.write(f"INFO Training at step {step} finished.\n")
            folder = job / f"global_step_{step}" / "actor"
            (folder / "huggingface").mkdir(parents=True, exist_ok=True)
            for kind in ("model", "optim", "extra_state"):  # each a whole archive: a zip's directory comes last
                (folder / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"")
                time.sleep(PART_S)
                write_archive(folder / f"{kind}_world_size_1_rank_0.pt", step)
            (folder / "huggingface" / "config.json").write_text("{}")
            write_weights(folder / "huggingface" / "model.safetensors")
            (job / TRACKER).write_text(str(step))
            if interrupted and (steps_after_ctrl_c := steps_after_ctrl_c - 1) < 0:
                print(f"interrupted: the last complete checkpoint is {job / f'global_step_{step}'} (step {step})",
                      file=sys.stderr, flush=True)
                sys.exit(130)
    print(f"training finished: {steps} step(s)", flush=True)


def write_archive(path: Path, step: int) -> None:
    """A zip archive, as torch.save writes one (what rftkit.checkpoints.missing_part checks), without torch."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", json.dumps({"step": step}))


def write_weights(path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(4, np.float32)}, str(path))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
