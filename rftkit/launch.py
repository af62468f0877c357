"""Launching an example's training run with agentscope.tuner.tune(), shared by both main.py files.

The flags, and the launch itself, which reads top to bottom: the YAML with the flags' overrides and
absolute paths (`rftkit.overrides`), sized to the GPUs (`rftkit.cluster`, which names what it
changed), its data checked; a dry run validates as tune() will and prints a summary
(`rftkit.trinity_config`). A run then resumes from complete state (`rftkit.run_state`), joins or
starts Ray with a setup hook for every worker, prints its start-up phases (`rftkit.startup`), and
runs tune() under a watchdog that ends it on the first fatal error and judges success from what
the run reached (`rftkit.supervise`). Ctrl-C exits 130, naming the last complete checkpoint.

Bad input (a YAML, a key, a model or data path) ends the program with an
`rftkit.inputs.InputError` before anything is written or started.
"""


from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path
from typing import Callable

from rftkit import cluster, gpu_samples, keys, lora, run_state, startup, supervise
from rftkit.needs import disk, memory
from rftkit.cli import above, at_least
from rftkit.example import PATHS_RULE, load
from rftkit.trainer import attention, liger
from rftkit.inputs import InputError
from rftkit.inputs.config_keys import check_set_key, check_values
from rftkit.overrides import (absolute, apply_overrides, config_paths_in_checkout, load_yaml, parse_override,
                              resolve_config, write_yaml)
from rftkit.check_patches import no_gpu_banner
from rftkit.summary import NOT_CHECKED, summarize
from rftkit.trinity_config import validate

NO_GPU_MESSAGE = ("error: training needs a CUDA GPU (Trinity-RFT's vLLM engines and FSDP trainer; one GPU holds both) "
                  "and none was found on this machine or in a running Ray cluster; add --dry-run to check the config "
                  "here (docs/gpu.md)")


def add_arguments(parser: argparse.ArgumentParser, default_config: str) -> None:
    """The flags both examples take."""
    parser.add_argument("--config", default=default_config, help="Trinity-RFT YAML (default: %(default)s)")
    parser.epilog = f"{parser.epilog}\n\n{PATHS_RULE}" if parser.epilog else PATHS_RULE
    parser.add_argument("--model-path", default=os.environ.get("MODEL_PATH"),
                        help="model to train, a hub id or a local folder (env MODEL_PATH; default: the YAML's)")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_ROOT_DIR"),
                        help="where checkpoints, logs and tensorboard files go "
                             "(env CHECKPOINT_ROOT_DIR; default: the YAML's)")
    parser.add_argument("--gpus", type=at_least(1), default=None,
                        help="GPUs per node to plan for (default: detected; with --dry-run and none "
                             f"detected, {cluster.DRY_RUN_GPUS}); a dry run given --gpus looks at no "
                             "machine or Ray cluster")
    parser.add_argument("--nodes", type=at_least(1), default=None,
                        help="nodes to plan for (default: detected, or 1; 1 in a dry run given --gpus)")
    parser.add_argument("--gpu-memory", type=above(0), default=None, metavar="GIB",
                        help="memory of each GPU, in GiB, that the trainer's estimate is checked against "
                             "(default: detected; a dry run given --gpus, or without a GPU, checks none)")
    parser.add_argument("--engines", type=at_least(1), default=None,
                        help="rollout engines (default: the config's engine_num where it leaves the trainer a "
                             "GPU, else half of all GPUs; divided by tensor parallel size)")
    parser.add_argument("--attn", choices=attention.ATTN_CHOICES, default=None,
                        help="the trainer's attention (default: the YAML's if it sets one, else auto: "
                             "flash_attention_2 where flash-attn imports, else varlen, PyTorch's own "
                             "kernels on packed micro-batches); sdpa and eager pad every micro-batch")
    parser.add_argument("--liger", choices=liger.LIGER_CHOICES, default=None,
                        help="liger-kernel's fused RMSNorm, SwiGLU and RoPE in the trainer (default: the YAML's "
                             "if it sets use_liger, else auto: on where liger-kernel is installed)")
    parser.add_argument("--lora", type=at_least(1), nargs="?", const=lora.DEFAULT_RANK, default=None, metavar="RANK",
                        help=f"train a LoRA adapter of this rank instead of the whole model (alone: rank "
                             f"{lora.DEFAULT_RANK}; default: the YAML's {keys.LORA_KEY}, none in the shipped configs)")
    parser.add_argument("--lora-alpha", type=at_least(1), default=None,
                        help=f"with --lora: the adapter's alpha (default: {lora.DEFAULT_ALPHA})")
    parser.add_argument("--lora-modules", nargs="+", default=None, metavar="NAME",
                        help=f"with --lora: the layers that get an adapter, by name (q_proj ...) (default: "
                             f"{lora.DEFAULT_MODULES}, every linear layer but the output layer)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=parse_override,
                        dest="set_values",
                        help="override one YAML key, dotted (list items by index), the value read as YAML: "
                             "--set buffer.batch_size=4 --set explorer.rollout_model.enforce_eager=true")
    parser.add_argument("--dry-run", action="store_true",
                        help="build and validate the exact config tune() would launch, print it and exit")


def launch(args: argparse.Namespace, workflow_func: Callable | str, judge_func: Callable | str | None = None,
           data: dict[str, str | None] | None = None,
           check_data: Callable[[dict], None] | None = None) -> int:
    """Dry-run or train, as `args` say; returns the process exit code.

    `workflow_func` and `judge_func` are functions or "module:function" paths, imported only once the flags,
    YAML and data have passed their checks. `data` maps a taskset role ("train", "eval") to the folder the
    flags give (None: the config's). `check_data(config)` refuses missing or bad data named in the resolved
    YAML, in a dry run too. Bad input ends the program before anything is written or started.
    """
    gc.disable()  # the checks import seconds of modules, whose collections on the way free nothing
    try:
        return _launch(args, workflow_func, judge_func, data, check_data)
    finally:
        gc.enable()


def check_memory(trinity_config, trainable: int | None, card_gib: float | None) -> tuple[str, str]:
    """The trainer's memory estimate and how it stands on the card (`rftkit.needs.memory`); a trainer that cannot fit
    the card is refused."""
    found = memory.estimate(trinity_config, trainable)
    on_the_gpu, refusal = memory.check(trinity_config, found, card_gib)
    if refusal:
        raise InputError(refusal)
    return memory.describe(found), on_the_gpu


def wait_for_a_save(job_dir: Path) -> int:
    """Wait while a checkpoint is being written, saying so; then the step the tracker names (0: none)."""
    if run_state.saving_step(job_dir) is not None:
        print("interrupted during a checkpoint save: waiting for it to finish (Ctrl-C again stops waiting)",
              file=sys.stderr, flush=True)
    return run_state.wait_for_save(job_dir)


def finish_save_then_stop(trinity_config) -> None:
    """The first Ctrl-C's stop, in the watchdog's thread: let a checkpoint being written finish, then kill the
    run's actors, so that Trinity's teardown, which follows the KeyboardInterrupt, has no save to cut (it ends
    with ray.shutdown(), which would kill a Trainer in the middle of one)."""
    wait_for_a_save(Path(trinity_config.checkpoint_job_dir))
    supervise.kill_trinity_actors(trinity_config)


def _launch(args, workflow_func, judge_func, data, check_data) -> int:
    cluster.check_switches()
    for key, _ in args.set_values:
        check_set_key(key)
    raw = load_yaml(args.config)
    check_values(raw, f"--config {args.config}")
    config_paths_in_checkout(raw)
    # Later entries win: the data flags (placed first), the path flags, then the attention, then each --set.
    # Typed paths are the current folder's (PATHS_RULE); a model that is no folder here is a hub id.
    overrides = {"model.model_path": args.model_path and absolute(args.model_path, maybe_hub_id=True),
                 "checkpoint_root_dir": args.checkpoint_dir and absolute(args.checkpoint_dir)}
    overrides = {key: value for key, value in overrides.items() if value is not None}
    data = {role: folder and absolute(folder) for role, folder in (data or {}).items()}
    attention_overrides, attention_reason = attention.choose(args.attn, raw, dict(args.set_values))
    overrides.update(attention_overrides)
    liger_overrides, liger_reason = liger.choose(args.liger, raw, dict(args.set_values))
    overrides.update(liger_overrides)
    overrides.update(lora.overrides(args.lora, args.lora_alpha, args.lora_modules))
    overrides.update(args.set_values)

    if args.dry_run and args.gpus:  # the plan is given: no machine or Ray cluster to look at
        nodes, gpus_detected, card_gib = 1, args.gpus, args.gpu_memory
    else:
        nodes, gpus_detected = cluster.detect_cluster()
        card_gib = args.gpu_memory or cluster.local_gpu_memory_gib()
    gpus = args.gpus or gpus_detected
    nodes = args.nodes or nodes
    if gpus_detected == 0 and not args.dry_run:
        print(NO_GPU_MESSAGE, file=sys.stderr)
        return 2
    planned = ""
    if gpus == 0:  # a dry run on a machine without GPUs; said with its summary, so that a refusal stays one line
        gpus = cluster.DRY_RUN_GPUS
        planned = f"no GPU detected: planning for {nodes} node(s) x {gpus} GPUs (set --gpus to change)\n"
    config = apply_overrides(raw, overrides, data)
    check_values(config, "--set")  # the file was checked: what is wrong now came with --set
    rollout = keys.get(config, "explorer.rollout_model") or {}
    try:
        plan = cluster.plan_cluster(nodes, gpus, int(rollout.get("tensor_parallel_size", 1)), args.engines,
                                    configured=rollout.get("engine_num"))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    config = resolve_config(config, {}, args.config)
    adapted = cluster.apply_plan(config, plan)
    adapted_lines = "".join(f"\n  {line}" for line in adapted)
    if problem := liger.fused_backend_problem(config, args.config):
        raise InputError(problem)
    if check_data is not None:
        check_data(config)
    lora.check(config)
    lora.adapter_saves(config)
    lora.fp32_adapter(config)
    lora_line = lora.describe(config)  # refuses modules the model lacks
    trainable = lora.trainable_parameters(config)
    lora.use_initial_adapter(config)
    workflow_func, judge_func = (load(f) if isinstance(f, str) else f for f in (workflow_func, judge_func))
    unloadable = attention.not_loadable(config, args.config) or liger.not_loadable(config, args.config)

    if args.dry_run:
        with no_gpu_banner():  # a dry run needs no GPU; a training run has one (it refuses at once without)
            trinity_config = validate(config, workflow_func, judge_func, args.config, args.set_values)
        memory_lines = check_memory(trinity_config, trainable, card_gib)
        print(planned + summarize(trinity_config, attention_reason, liger_reason, lora_line, memory_lines,
                                  disk.describe(trinity_config, trainable)))
        print(f"adapted to this machine: {adapted_lines or 'nothing'}")
        if unloadable:  # valid, and possibly meant for another machine: this one would refuse it at launch
            print(f"not on this machine (a launch here refuses it): {unloadable}")
        print(f"not checked by a dry run: {'; '.join(NOT_CHECKED)}")
        print("dry run: the config is valid; nothing was launched")
        return 0

    # The config tune() will build from the file written below: its Ray namespace, log folder and step
    # targets. Validated first, so that a setting Trinity rejects leaves nothing written.
    trinity_config = validate(config, workflow_func, judge_func, args.config, args.set_values)
    if unloadable:  # a config this machine cannot run: exit 2, before anything starts
        raise InputError(unloadable)
    estimated, on_the_gpu = check_memory(trinity_config, trainable, card_gib)
    print(f"trainer memory: {estimated}; {on_the_gpu}", flush=True)
    if disk_line := disk.describe(trinity_config, trainable):
        print(f"checkpoints on disk: {disk_line}", flush=True)
    if adapted:
        print(f"adapted to this machine: {adapted_lines}", flush=True)
    print(f"trainer attention: {attention.describe(config)} ({attention_reason})", flush=True)
    print(f"trainer layers: {liger.describe(config)} ({liger_reason})", flush=True)
    if lora_line:
        print(f"trained: {lora_line}", flush=True)
    resume = run_state.rewind(trinity_config.checkpoint_job_dir, trinity_config.explorer.name)
    if resume.message:
        print(resume.message, flush=True)
    lora.write_initial_adapter(config)
    path = write_yaml(config, Path(config["checkpoint_root_dir"]) / f"{config['project']}-{config['name']}.yaml")
    print(f"launch config: {path}", flush=True)
    gc.enable()  # the driver lives as long as the run
    from agentscope.tuner import tune

    logs_before = supervise.log_sizes(trinity_config.log.save_dir)
    timeline = startup.Timeline(Path(trinity_config.checkpoint_job_dir) / startup.FILE_NAME)
    timeline.mark("config checked")
    started_ray = cluster.ensure_ray()
    started = time.perf_counter()

    def give_up(error: supervise.FatalError) -> None:  # tune() did not return after the actors were killed
        print(f"error: training failed: {error}; the run did not stop by itself", file=sys.stderr, flush=True)
        if started_ray:
            cluster.ray_cli("stop", "--force")
        os._exit(1)

    try:
        cluster.connect_ray(trinity_config, timeline.path)
        timeline.mark("Ray connected")
        with timeline, gpu_samples.sampled(trinity_config.checkpoint_job_dir), \
                supervise.Watchdog(trinity_config.log.save_dir,
                                   lambda: supervise.kill_trinity_actors(trinity_config), give_up,
                                   since=logs_before,
                                   on_interrupt=lambda: finish_save_then_stop(trinity_config)) as watchdog:
            status = tune(workflow_func=workflow_func, judge_func=judge_func, config_path=str(path))
    except KeyboardInterrupt:  # Ctrl-C: the run's actors end with this driver (and with Ray, if we started it)
        job_dir = Path(trinity_config.checkpoint_job_dir)
        step = wait_for_a_save(job_dir)
        last = f"{job_dir / f'global_step_{step}'} (step {step})" if step else f"none yet, in {job_dir}"
        print(f"interrupted: the last complete checkpoint is {last}", file=sys.stderr, flush=True)
        return 130
    finally:
        if started_ray:  # leave the machine as we found it
            cluster.ray_cli("stop")
    result = supervise.outcome(status, watchdog.error, trinity_config, since=logs_before)
    if not result.success:
        print(f"error: training failed: {result.message}", file=sys.stderr)
        return 1
    print(f"{result.message} in {time.perf_counter() - started:.0f} s; "
          f"checkpoints in {trinity_config.checkpoint_job_dir}")
    return 0
