"""GPU kill test: a BOTS run stopped again and again (SIGKILL, and once Ctrl-C during a save), relaunched each
time with the same command, ends as a run that was never stopped would.

    python -m tests.gpu.kill_anywhere --out /tmp/kills [--kills 5] [--steps 30] [--window 8] [--seed 0]

Run it from the repo's root. The tiny model, data and settings of the GPU smoke (tests/gpu/smoke.py), a
checkpoint at every step, as tests/gpu/resume_smoke.py uses them. Each launch but the last is killed as a lost
machine would leave it (SIGKILL to its whole process group, then `ray stop --force`):

* the first kill comes while a checkpoint is being written, after the first: verl writes `global_step_N` in
  place and the tracker names N last, so a folder past the tracker's step is a save under way;
* the second launch gets one SIGINT, as from Ctrl-C (runkit.steps.interrupt), while a checkpoint is being
  written: that save must end complete, and the launch exit 130 naming the newest complete checkpoint;
* each other kill comes at a random moment, 0 to `--window` seconds after that launch has trained a step
  (so every launch gets somewhere): in an explore step, a train step, a weight sync or a save.

What each kill left is recorded: the tracker's step, the newest complete checkpoint at or before it (where
the relaunch must go on from, rftkit.checkpoints.fall_back), the explorer's step and the BOTS posteriors
it had saved per step. After the kills, the same command runs to its end. Checks, from what each relaunch
added to the run's logs (tests/gpu/resume_smoke.check_resume):

* each relaunch loaded the newest complete checkpoint and trained the steps after it once each, in order;
  its explorer went on from there, each step once; its posteriors were those saved at that step;
* the last launch exits 0 and says it finished every step, and its last checkpoint's HF weights load
  with transformers.

The tiny model trains a step in seconds, so each kill costs a few steps (the relaunch's first step, then up
to --window seconds), and the default 30 steps leave the last launch some to train. Each launch's
kill and checks are printed, and <out>/summary.json (each kill and every check so far) is rewritten, as
soon as that launch ends: a test cut short keeps what it had shown. The launch logs are <out>/launch_<i>.log.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from runkit.runs import job_dir
from runkit.steps import run_step, wait_for_free_gpus
from tests.gpu.resume_smoke import bots_run_parser, check_resume, logs_since, prepare_run, saved_state
from tests.gpu.smoke import Check


def kill_moment(checkpoints: Path, during_save: bool, delay: float):
    """A `stop_when` for run_step: true once a checkpoint is being written (`during_save`), or `delay`
    seconds after this launch's trainer has saved a step past the one it started from. Its `fired` says
    whether it was ever true (run_step also kills at its timeout)."""
    from rftkit.checkpoints import saved_steps, tracker_step

    job = job_dir(checkpoints)
    first = (tracker_step(job) or 0) if job else 0
    progressed_at: list[float] = []

    def due() -> bool:
        job = job_dir(checkpoints)
        if job is None:
            return False
        named = tracker_step(job) or 0
        if during_save:
            under_way = [step for step in saved_steps(job) if step > named] if named > first else []
            now.saving = max(under_way, default=None)
            return bool(under_way)
        if not progressed_at and named > first:
            progressed_at.append(time.monotonic())
        return bool(progressed_at) and time.monotonic() - progressed_at[0] >= delay

    def now() -> bool:
        now.fired = now.fired or due()
        return now.fired

    now.fired, now.saving = False, None  # saving: the step being written when a during_save moment came
    return now


def state_at_kill(job: Path) -> dict:
    """saved_state, with the step the relaunch must go on from: the newest complete checkpoint the tracker allows."""
    from rftkit.checkpoints import complete_steps, tracker_step

    killed = saved_state(job)
    tracker = tracker_step(job) or 0
    complete = complete_steps(job, up_to=tracker)
    killed.update(tracker=tracker, trainer_step=complete[0] if complete else 0)
    return killed


def loads_with_transformers(job: Path, step: int) -> Check:
    folder = job / f"global_step_{step}" / "actor" / "huggingface"
    probe = subprocess.run([sys.executable, "-c", "import sys, transformers; "
                            "transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])", str(folder)],
                           capture_output=True, text=True)
    return Check(f"step {step}'s HF weights load with transformers", probe.returncode == 0,
                 probe.stderr.strip().splitlines()[-1][:200] if probe.returncode else str(folder))


def ctrl_c_checks(launch: int, code: int | None, log_text: str, job: Path, saving: int | None) -> list[Check]:
    """A launch that got one SIGINT while it was writing checkpoint `saving`: that save ended complete (not
    torn), the launch exited 130, and it named the newest complete checkpoint. The trainer may finish a step
    it has begun before it stops, so the checkpoint named may be later than `saving`; the launcher's
    "waiting" line shows only when it found the save still under way."""
    from rftkit.checkpoints import complete_steps, tracker_step

    tracker = tracker_step(job) or 0
    complete = complete_steps(job, up_to=tracker)
    newest = complete[0] if complete else None
    named = f"the last complete checkpoint is {job / f'global_step_{newest}'} (step {newest})"
    waited = "waiting for it to finish" in log_text
    return [
        Check(f"launch {launch}: Ctrl-C during the save of step {saving} exits 130", code == 130, f"exit code {code}"),
        Check(f"launch {launch}: the save under way at Ctrl-C ended complete", saving in complete,
              f"tracker at step {tracker}, complete: {complete[:3]}; "
              f"{'the launcher waited for it' if waited else 'it had finished before the launcher looked'}"),
        Check(f"launch {launch}: it names the newest complete checkpoint", newest is not None and named in log_text,
              next((line for line in log_text.splitlines() if "last complete checkpoint" in line), "no line")[:200]),
    ]


def report(out: Path, kills: list[dict], checks: list[Check], new: list[Check]) -> None:
    """Add `new` to `checks`, print them, and rewrite <out>/summary.json with every kill and check so far."""
    checks += new
    for check in new:
        print(f"  {'ok  ' if check.ok else 'FAIL'} {check.name} {check.detail}", flush=True)
    (out / "summary.json").write_text(json.dumps({"kills": kills, "checks": [asdict(c) for c in checks]}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = bots_run_parser("python -m tests.gpu.kill_anywhere", __doc__, steps=30, out="gpu-kills")
    parser.add_argument("--kills", type=int, default=5, help="launches to kill (default: %(default)s)")
    parser.add_argument("--window", type=float, default=8,
                        help="a random kill comes up to this many seconds after the launch trained a step "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="for the random kill moments (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0 < args.kills < args.steps:
        parser.error(f"--kills: each kill needs a step of progress before it, so 1 to --steps - 1 (got "
                     f"{args.kills} with --steps {args.steps})")

    from rftkit.supervise import log_sizes

    out, checkpoints, command = prepare_run(args)
    rng = random.Random(args.seed)
    print(f"== {args.config}, {args.steps} steps, {args.kills} kills: {' '.join(command[1:])}", flush=True)

    kills, checks = [], []
    previous = None  # what the last kill left, which the next launch must go on from
    for launch in range(args.kills + 1):
        last = launch == args.kills
        ctrl_c = launch == 1 and not last
        during_save, delay = launch in (0, 1), rng.uniform(0, args.window)
        job = job_dir(checkpoints)
        since = log_sizes(job / "log") if job else {}
        log = out / f"launch_{launch}.log"
        stop = None if last else kill_moment(checkpoints, during_save, delay)
        step = run_step(command, log, label=f"launch {launch}", timeout=args.timeout, stop_when=stop,
                        on_stop="interrupt" if ctrl_c else "kill")
        job = job_dir(checkpoints)
        killed_now = stop is not None and stop.fired
        if not last and not killed_now:
            report(out, kills, checks, [Check(f"launch {launch} was killed at its moment, before the run ended",
                                              False, f"exit code {step.code} (None: killed at --timeout), after "
                                                     f"{step.seconds:.0f} s")])
            break
        if previous is not None:
            report(out, kills, checks, [Check(f"launch {launch}: {c.name}", c.ok, c.detail) for c in check_resume(
                previous, log.read_text(errors="replace"), logs_since(job, since), job, args.steps, step.code,
                killed_again=killed_now)])
        if killed_now:
            wait_for_free_gpus()  # the killed engine lets go of its memory a few seconds after Ray stops
            previous = state_at_kill(job)
            moment = "Ctrl-C during a save" if ctrl_c else "during a save" if during_save else \
                f"{delay:.1f} s after a trained step"
            kills.append({"launch": launch, "after_s": round(step.seconds, 1), "moment": moment,
                          **{k: previous[k] for k in ("tracker", "trainer_step", "explorer_step")},
                          **({"saving": stop.saving} if during_save else {})})
            print(f"killed launch {launch} {kills[-1]['moment']}: tracker at step {previous['tracker']}, going on "
                  f"from {previous['trainer_step']}; explorer at step {previous['explorer_step']}", flush=True)
            report(out, kills, checks, ctrl_c_checks(launch, step.code, log.read_text(errors="replace"), job,
                                                     stop.saving) if ctrl_c else [])
    else:
        report(out, kills, checks, [loads_with_transformers(job, args.steps)])

    failed = [c.name for c in checks if not c.ok]
    print(f"kill test: {len(kills)} kills, {len(checks) - len(failed)} checks passed, {len(failed)} failed",
          flush=True)
    return 1 if failed or len(kills) < args.kills else 0


if __name__ == "__main__":
    sys.exit(main())
