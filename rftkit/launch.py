"""Launching an example's training run with agentscope.tuner.tune(), shared by both main.py files.

A launch goes:

1. read the example's YAML, apply the command-line overrides, make relative
   paths absolute (Ray workers do not share our working directory);
2. size the run to the GPUs: cluster shape, and as many rollout engines as
   half the GPUs hold (the trainer gets the rest); on a single GPU, one engine
   and the trainer share it (Trinity's `colocate` mode, `rftkit.colocate`);
3. `--dry-run`: check the data splits that exist here, convert the config
   exactly as tune() does (agentscope's conversion, then Trinity's
   `check_and_update`) and print a summary: no Ray, no GPU;
4. otherwise: refuse at once without a CUDA GPU, validate as in 3, prepare
   and check the data, check that the configured attention implementation can
   be loaded (`rftkit.attention`), make sure a Ray cluster is running (start
   a local head if not, and stop it afterwards) and connect to it as Trinity
   would, plus a per-worker setup hook; call tune() under a watchdog that
   ends the run on the first fatal error in its logs, and decide success from
   what the run reached, not from tune()'s status alone (`rftkit.supervise`);
   Ctrl-C ends the run with exit code 130.

Bad input (a YAML, a key, a model or data path) ends the program with an
`rftkit.inputs.InputError` before anything is written or started.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from rftkit import attention, colocate, run_state, supervise, weight_sync, workers
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError

NO_GPU_MESSAGE = """\
error: training needs CUDA GPUs and none were found on this machine or in a running Ray cluster.
Trinity-RFT runs vLLM rollout engines and an FSDP trainer on GPUs (one GPU can hold both); see
docs/gpu.md. To check the full training config on this machine, add --dry-run."""

PLUGIN_DIR = Path(__file__).resolve().parent / "trinity_plugins"
PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"  # trinity.common.constants.PLUGIN_DIRS_ENV_VAR

# Rollout engines get this share of the GPUs; the trainer gets the rest.
EXPLORER_SHARE = 0.5
# What --dry-run plans for when this machine has no GPU and --gpus is not given: one 8-GPU node.
DRY_RUN_GPUS = 8
# A model path that absolute() kept as it was and that is not a hub id ("gpt2", "Qwen/Qwen3-0.6B") was meant
# as a local folder ("models/qwen/final"); one that does not exist is refused before anything starts.
HUB_ID = re.compile(r"[^/]+(/[^/]+)?")


def add_arguments(parser: argparse.ArgumentParser, default_config: str) -> None:
    """The flags both examples take."""
    parser.add_argument("--config", default=default_config, help="Trinity-RFT YAML (default: %(default)s)")
    parser.add_argument("--model-path", default=os.environ.get("MODEL_PATH"),
                        help="model to train, a hub id or a local folder (env MODEL_PATH; default: the YAML's)")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CHECKPOINT_ROOT_DIR"),
                        help="where checkpoints, logs and tensorboard files go "
                             "(env CHECKPOINT_ROOT_DIR; default: the YAML's)")
    parser.add_argument("--gpus", type=int, default=None,
                        help="GPUs per node to plan for (default: detected; with --dry-run and none "
                             f"detected, {DRY_RUN_GPUS})")
    parser.add_argument("--nodes", type=int, default=None, help="nodes to plan for (default: detected, or 1)")
    parser.add_argument("--engines", type=int, default=None,
                        help="rollout engines (default: half of all GPUs, divided by tensor parallel size)")
    parser.add_argument("--attn", choices=attention.ATTN_CHOICES, default=None,
                        help="the trainer's attention (default: the YAML's if it sets one, else auto: "
                             "flash_attention_2 where flash-attn imports, else varlen, PyTorch's own "
                             "kernels on packed micro-batches); sdpa and eager pad every micro-batch")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", type=parse_override,
                        dest="set_values",
                        help="override one YAML key, dotted (list items by index), the value read as YAML: "
                             "--set buffer.batch_size=4 --set explorer.rollout_model.enforce_eager=true")
    parser.add_argument("--dry-run", action="store_true",
                        help="build and validate the exact config tune() would launch, print it and exit")


def parse_override(text: str) -> tuple[str, Any]:
    """ "a.b=1" -> ("a.b", 1); the value is parsed as YAML, so numbers, booleans and lists keep their type."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{key}: the value {value!r} is not valid YAML ({exc})") from None


def set_key(config: dict, dotted: str, value: Any) -> None:
    """Set `config["a"]["b"][0]["c"]` from "a.b.0.c", creating missing mappings."""
    *parents, last = dotted.split(".")
    node = config
    try:
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    except (ValueError, IndexError, AttributeError, TypeError):
        raise InputError(f"cannot set {dotted}: the config has no such place") from None


def get_key(config: dict, dotted: str, config_file: str) -> Any:
    """`config["a"]["b"]` for "a.b", or exit naming the key that `config_file` lacks."""
    node = config
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            raise InputError(f"{config_file}: no key {dotted} (expected a Trinity-RFT config like those in configs/)")
        node = node[key]
    return node


def absolute(path: str, maybe_hub_id: bool = False) -> str:
    """`path` made absolute against the working directory.

    With `maybe_hub_id`, a relative path that does not exist and does not start
    with "." or "~" is taken for a hub id ("Qwen/Qwen2.5-3B-Instruct") and kept.
    """
    candidate = Path(path).expanduser()
    if maybe_hub_id and not (candidate.is_absolute() or path.startswith((".", "~")) or candidate.exists()):
        return path
    return str(candidate.resolve())


def plan_cluster(nodes: int, gpus_per_node: int, tensor_parallel: int, engines: int | None) -> dict:
    """Cluster shape, rollout engine count and Trinity mode for `nodes` x `gpus_per_node` GPUs."""
    total = nodes * gpus_per_node
    if total == 1:  # the engine and the trainer share the one GPU
        if tensor_parallel != 1 or engines not in (None, 1):
            raise ValueError(f"one GPU holds one rollout engine of one GPU beside the trainer; got "
                             f"{engines or 1} engine(s) x tensor_parallel_size {tensor_parallel}")
        return {"node_num": 1, "gpu_per_node": 1, "engine_num": 1, "mode": "colocate"}
    if engines is None:
        engines = max(1, int(total * EXPLORER_SHARE) // tensor_parallel)
    if engines < 1:
        raise ValueError(f"--engines must be at least 1, got {engines}")
    if engines * tensor_parallel >= total:
        raise ValueError(f"{engines} rollout engine(s) x {tensor_parallel} GPU(s) leave none of the {total} "
                         f"GPU(s) for the trainer; use --engines or more GPUs")
    return {"node_num": nodes, "gpu_per_node": gpus_per_node, "engine_num": engines, "mode": "both"}


def load_yaml(path: str | Path) -> dict:
    """The YAML mapping at `path`, or exit with a message naming the flag."""
    try:
        config = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:  # a folder, an unreadable or a binary file
        raise InputError(f"--config {path}: cannot read it as text ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"--config {path}: not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"--config {path}: expected a YAML mapping of Trinity-RFT settings")
    return config


# The reference model only runs forward passes, in bf16 under FSDP's mixed precision. Trinity 0.6 keeps
# its weights in fp32, and verl keeps a forward-only model's weights on the CPU and copies them to the GPU
# for every micro-batch (FSDP2's CPUOffloadPolicy): in bf16 that copy is half as large, the log-probs the
# same. A value in the YAML or --set is kept.
REF_DTYPE_KEY = "trainer.trainer_config.ref.fsdp_config.model_dtype"
REF_DTYPE = "bfloat16"


def resolve_config(config: dict, overrides: dict[str, Any], plan: dict,
                   config_file: str = "the config") -> dict:
    """The YAML mapping tune() will load: overrides and cluster plan applied, paths absolute.

    A local model folder that does not exist, or a checkpoint folder that
    cannot be written, is refused here, before anything starts.
    """
    config = copy.deepcopy(config)
    for dotted, value in overrides.items():
        set_key(config, dotted, value)
    try:
        get_key(config, REF_DTYPE_KEY, config_file)
    except InputError:
        set_key(config, REF_DTYPE_KEY, REF_DTYPE)
    config["checkpoint_root_dir"] = absolute(config.get("checkpoint_root_dir", "./checkpoints"))
    check_writable(config["checkpoint_root_dir"], "checkpoint_root_dir (--checkpoint-dir)")
    model_path = absolute(get_key(config, "model.model_path", config_file), maybe_hub_id=True)
    if not Path(model_path).exists() and not HUB_ID.fullmatch(model_path):
        raise InputError(f"model.model_path (--model-path) {model_path}: no such folder "
                         f"(expected a local model folder or a hub id such as Qwen/Qwen3-0.6B)")
    config["model"]["model_path"] = model_path
    get_key(config, "buffer.explorer_input.taskset.path", config_file)  # eval tasksets are optional
    explorer_input = config["buffer"]["explorer_input"]
    for taskset in [explorer_input["taskset"], *explorer_input.get("eval_tasksets", [])]:
        taskset["path"] = absolute(taskset["path"])
    config.setdefault("cluster", {}).update(node_num=plan["node_num"], gpu_per_node=plan["gpu_per_node"])
    set_key(config, "explorer.rollout_model.engine_num", plan["engine_num"])
    if plan["mode"] == "colocate":
        config["mode"] = "colocate"
        rollout = config["explorer"]["rollout_model"]
        # At or under Trinity's cap, so that its validator leaves the GPU choice below alone (above
        # the cap it also sets the engine's GPU to "0", the machine's first, whatever Ray was given).
        rollout["gpu_memory_utilization"] = min(rollout.get("gpu_memory_utilization", 1.0),
                                                colocate.ENGINE_MEMORY_SHARE)
        # The engine reserves no Ray GPU, so Ray does not choose its device: name the one we counted.
        rollout["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return config


def write_yaml(config: dict, path: Path) -> Path:
    with atomic_paths(path) as (tmp,):
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


_loaded_plugin_dirs: set[str] = set()


def use_plugins() -> None:
    """Make this project's Trinity plugins (the resumable BOTS selector) known here and in Ray actors.

    The import registers them in this process, where the config is validated;
    Trinity passes TRINITY_PLUGIN_DIRS on to its actors, which load the folder.
    Other folders already in TRINITY_PLUGIN_DIRS (a user's own plugins) are
    loaded here too, with Trinity's loader, so that configs naming them validate.
    """
    import rftkit.trinity_plugins.resumable_bots  # noqa: F401 - registers on import

    dirs = [d for d in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if d]
    others = [d for d in dirs if d != str(PLUGIN_DIR) and d not in _loaded_plugin_dirs]
    if others:
        from trinity.utils.plugin_loader import load_plugin_from_dirs

        load_plugin_from_dirs(others)
        _loaded_plugin_dirs.update(others)
    if str(PLUGIN_DIR) not in dirs:
        os.environ[PLUGIN_DIRS_ENV] = os.pathsep.join([*dirs, str(PLUGIN_DIR)])


def build_trinity_config(config_path: str | Path, workflow_func: Callable, judge_func: Callable | None = None):
    """The validated Trinity config tune() would run for this YAML and these functions."""
    use_plugins()
    from agentscope.tuner import check_judge_function, check_workflow_function
    from agentscope.tuner._config import _to_trinity_config  # the conversion tune() itself calls

    check_workflow_function(workflow_func)
    if judge_func is not None:
        check_judge_function(judge_func)
    config = _to_trinity_config(config_path=str(config_path), workflow_func=workflow_func, judge_func=judge_func)
    return config.check_and_update()


def validate(config: dict, workflow_func: Callable, judge_func: Callable | None = None,
             config_file: str = "the config"):
    """Trinity's validated config for this YAML mapping, as tune() will build it, with no side effects.

    check_and_update() creates the run's folders, so it runs on a copy whose
    checkpoint root is a scratch folder; the run's own paths are then set back.
    A setting Trinity rejects ends the program with Trinity's message.
    """
    with tempfile.TemporaryDirectory(prefix="rftkit-check-") as scratch:
        copy_in_scratch = dict(config, checkpoint_root_dir=scratch)
        try:
            trinity_config = build_trinity_config(write_yaml(copy_in_scratch, Path(scratch) / "config.yaml"),
                                                  workflow_func, judge_func)
        except (ValueError, AssertionError) as exc:  # how Trinity's loader and check_and_update() reject settings
            raise InputError(f"{config_file}: {exc}") from None
    trinity_config.checkpoint_root_dir = config["checkpoint_root_dir"]
    trinity_config.checkpoint_job_dir = trinity_config.get_checkpoint_job_dir()
    trinity_config.log.save_dir = os.path.join(trinity_config.checkpoint_job_dir, "log")
    job_dir = Path(trinity_config.checkpoint_job_dir)
    if not trinity_config.continue_from_checkpoint and job_dir.is_dir() and any(job_dir.iterdir()):
        # Trinity would rename the run with a timestamp; the launcher could then not find its logs.
        raise InputError(f"{job_dir} exists and continue_from_checkpoint is false: remove it, "
                         f"choose another name (--set name=...), or set continue_from_checkpoint: true")
    return trinity_config


def summarize(config, attention_reason: str = "") -> str:
    """A readable account of what a validated Trinity config will run; `attention_reason` says why
    the trainer's attention is the one it is."""
    rollout = config.explorer.rollout_model
    explorer_input = config.buffer.explorer_input
    lines = [
        f"experiment      {config.project}/{config.name} (mode {config.mode})",
        f"model           {config.model.model_path}",
        f"  lengths       max_model_len {config.model.max_model_len}, "
        f"prompt {config.model.max_prompt_tokens}, response {config.model.max_response_tokens}",
        f"algorithm       {config.algorithm.algorithm_type}: group {config.algorithm.repeat_times}, "
        f"batch {config.buffer.batch_size} tasks ({config.buffer.train_batch_size} experiences), "
        f"lr {config.algorithm.optimizer.lr}",
        f"  advantage     {config.algorithm.advantage_fn} {config.algorithm.advantage_fn_args}",
        f"  policy loss   {config.algorithm.policy_loss_fn}",
    ]
    for taskset in explorer_input.tasksets:
        selector = taskset.data_selector
        lines.append(f"train taskset   {taskset.name}: {taskset.path} [{taskset.split}], "
                     f"{config.buffer.total_epochs} epoch(s), selector {selector.selector_type}")
        if selector.feature_keys:
            lines.append(f"  features      {selector.feature_keys} {selector.kwargs}")
        lines.append(f"  workflow      {taskset.default_workflow_type}: "
                     f"{_name(taskset.workflow_args.get('workflow_func'))}"
                     f", judge {_name(taskset.workflow_args.get('judge_func'))}")
    for taskset in explorer_input.eval_tasksets:
        lines.append(f"eval taskset    {taskset.name}: {taskset.path} [{taskset.split}], "
                     f"{taskset.repeat_times} rollout(s) per task, every {config.explorer.eval_interval} steps"
                     + (" and before the first" if config.explorer.eval_on_startup else ""))
    operators = [op.name for op in config.data_processor.experience_pipeline.operators] \
        if config.data_processor.experience_pipeline else []
    lines += [
        f"operators       {operators or 'none'} (then the algorithm's advantage)",
        f"cluster         {config.cluster.node_num} node(s) x {config.cluster.gpu_per_node} GPU(s): "
        f"{rollout.engine_num} rollout engine(s) x {rollout.tensor_parallel_size} GPU, "
        f"trainer {config.cluster.trainer_gpu_num} GPU(s)"
        + (f", on the same GPU (colocate; engine memory {rollout.gpu_memory_utilization:g})"
           if config.mode == "colocate" else ""),
        "micro-batches   " + (f"dynamic, up to {config.trainer.max_token_len_per_gpu} tokens per GPU"
                                 if config.trainer.use_dynamic_bsz else "fixed size")
        # without padding removal every row is padded to the micro-batch's longest: more than the budget
        + ("" if config.trainer.use_remove_padding else ", each row padded to the micro-batch's longest"),
        f"rollout         openai api {rollout.enable_openai_api}, history {rollout.enable_history}, "
        f"tool parser {rollout.tool_call_parser}, runners/engine {config.explorer.runner_per_model}",
        f"sync            {config.synchronizer.sync_method.value}, every {config.synchronizer.sync_interval} step(s)",
        f"checkpoints     {config.checkpoint_job_dir}, every {config.trainer.save_interval} steps",
        f"monitor         {config.monitor.monitor_type}",
        f"attention       {attention.describe({'trainer': vars(config.trainer)})}",
    ]
    if attention_reason:
        lines.append(f"  chosen by     {attention_reason}")
    lines.append(f"reference model {reference_placement(config)}")
    return "\n".join(lines)


def reference_placement(config) -> str:
    """The reference model's weights: dtype, and where rftkit.ref_model leaves them."""
    ref = (config.trainer.trainer_config or {}).get("ref", {}).get("fsdp_config", {})
    offload = ref.get("param_offload", config.trainer.param_offload)
    return (f"{ref.get('model_dtype', 'fp32')} weights, "
            + ("on the CPU, copied in for every micro-batch (param_offload)" if offload else "on the GPU"))


def _name(func: Callable | None) -> str:
    return "none" if func is None else f"{func.__module__}.{func.__qualname__}"


def detect_cluster() -> tuple[int, int]:
    """(nodes, GPUs per node) of a running Ray cluster, else of this machine."""
    import ray

    try:
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    except ConnectionError:
        import torch

        return 1, torch.cuda.device_count()
    try:
        gpu_nodes = [n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
    finally:
        ray.shutdown()
    return (len(gpu_nodes), int(min(gpu_nodes))) if gpu_nodes else (1, 0)


def ray_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", *args], check=True)


def connect_ray(trinity_config) -> None:
    """Connect to Ray as Trinity's run_stage() would, plus a setup hook for every worker process.

    Trinity calls ray.init() with `ignore_reinit_error`, so this connection, made
    first with the same namespace and environment, is the one the run uses. The
    hook (`rftkit.workers.setup`) lets verl's trainer workers run without
    flash-attn and writes Trinity's state files so that a killed run resumes;
    on one GPU (`rftkit.workers.setup_colocated`) it also keeps the rollout
    engine from reserving the GPU the trainer needs, and hands the weights over
    in the engine's dtype, as byte views of the object store.
    """
    import ray

    hook = workers.setup_colocated if trinity_config.mode == "colocate" else workers.setup
    env_vars = trinity_config.get_envs()
    if trinity_config.mode == "colocate":  # weights through the object store: in the engine's dtype
        env_vars[weight_sync.DTYPE_ENV] = trinity_config.explorer.rollout_model.dtype
    ray.init(address=trinity_config.cluster.ray_address, namespace=trinity_config.ray_namespace,
             runtime_env={"env_vars": env_vars,
                          "worker_process_setup_hook": f"{hook.__module__}.{hook.__name__}"})


def ensure_ray() -> bool:
    """Start a local Ray head unless a cluster is reachable; True if we started it."""
    import ray

    try:
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        ray.shutdown()
        return False
    except ConnectionError:
        print("no Ray cluster running: starting a local head (ray start --head)", flush=True)
        ray_cli("start", "--head", "--disable-usage-stats")
        return True


def launch(args: argparse.Namespace, workflow_func: Callable, judge_func: Callable | None = None,
           overrides: dict[str, Any] | None = None,
           prepare: Callable[[dict, bool], None] | None = None) -> int:
    """Dry-run or train, as `args` say; returns the process exit code.

    `prepare(config, dry_run)` gets the resolved YAML mapping (overrides
    applied, paths absolute) to check the data it names; before a real launch
    it may also make missing data. Bad input ends the program with an
    InputError before anything is written or started.
    """
    for flag in ("gpus", "nodes", "engines"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise InputError(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    raw = load_yaml(args.config)
    # Later entries win: the path flags, then the attention, then each --set in order.
    overrides = {"model.model_path": args.model_path, "checkpoint_root_dir": args.checkpoint_dir,
                 **(overrides or {})}
    overrides = {key: value for key, value in overrides.items() if value is not None}
    attention_overrides, attention_reason = attention.choose(args.attn, raw, dict(args.set_values))
    overrides.update(attention_overrides)
    overrides.update(args.set_values)

    nodes, gpus_detected = detect_cluster()
    gpus = args.gpus or gpus_detected
    nodes = args.nodes or nodes
    if gpus_detected == 0 and not args.dry_run:
        print(NO_GPU_MESSAGE, file=sys.stderr)
        return 2
    if gpus == 0:  # a dry run on a machine without GPUs
        gpus = DRY_RUN_GPUS
        print(f"no GPU detected: planning for {nodes} node(s) x {gpus} GPUs (set --gpus to change)")
    tensor_parallel = int(raw.get("explorer", {}).get("rollout_model", {}).get("tensor_parallel_size", 1))
    try:
        plan = plan_cluster(nodes, gpus, tensor_parallel, args.engines)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    config = resolve_config(raw, overrides, plan, args.config)

    if args.dry_run:
        if prepare is not None:
            prepare(config, True)
        print(summarize(validate(config, workflow_func, judge_func, args.config), attention_reason))
        if gpus_detected == 0:
            print("(Trinity's NO GPU DETECTED notice above only means it could not estimate GPU memory here.)")
        print("dry run: the config is valid; nothing was launched")
        return 0

    # The config tune() will build from the file written below: its Ray namespace, log folder and step
    # targets. Validated first, so that a setting Trinity rejects leaves nothing written.
    trinity_config = validate(config, workflow_func, judge_func, args.config)
    if prepare is not None:
        prepare(config, False)
    attention.check_attention(config, args.config)
    print(f"trainer attention: {attention.describe(config)} ({attention_reason})", flush=True)
    resume = run_state.rewind(trinity_config.checkpoint_job_dir, trinity_config.explorer.name)
    if resume.message:
        print(resume.message, flush=True)
    path = write_yaml(config, Path(config["checkpoint_root_dir"]) / f"{config['project']}-{config['name']}.yaml")
    print(f"launch config: {path}", flush=True)
    from agentscope.tuner import tune

    logs_before = supervise.log_sizes(trinity_config.log.save_dir)
    started_ray = ensure_ray()
    started = time.perf_counter()

    def give_up(error: supervise.FatalError) -> None:  # tune() did not return after the actors were killed
        print(f"error: training failed: {error}; the run did not stop by itself", file=sys.stderr, flush=True)
        if started_ray:
            ray_cli("stop", "--force")
        os._exit(1)

    try:
        connect_ray(trinity_config)
        with supervise.Watchdog(trinity_config.log.save_dir, lambda: supervise.kill_trinity_actors(trinity_config),
                                give_up, since=logs_before) as watchdog:
            status = tune(workflow_func=workflow_func, judge_func=judge_func, config_path=str(path))
    except KeyboardInterrupt:  # Ctrl-C: the run's actors end with this driver (and with Ray, if we started it)
        _, trainer_step = supervise.reached_steps(trinity_config)
        print(f"interrupted: the trainer's last saved state is step {trainer_step}; checkpoints in "
              f"{trinity_config.checkpoint_job_dir}", file=sys.stderr, flush=True)
        return 130
    finally:
        if started_ray:  # leave the machine as we found it
            ray_cli("stop")
    result = supervise.outcome(status, watchdog.error, trinity_config, since=logs_before)
    if not result.success:
        print(f"error: training failed: {result.message}", file=sys.stderr)
        return 1
    print(f"{result.message} in {time.perf_counter() - started:.0f} s; "
          f"checkpoints in {trinity_config.checkpoint_job_dir}")
    return 0
