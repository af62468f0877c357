"""Trinity's side of a launch: its plugins, its validation of the config, and the summary a dry run prints.

`validate` builds the config exactly as tune() will (agentscope's conversion, then Trinity's
`check_and_update`) without leaving anything behind; `summarize` says what that config will run.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from omegaconf.errors import OmegaConfBaseException

from rftkit import trinity_plugins
from rftkit.trainer import attention, configured, liger
from rftkit.patches.apply import install, replace, source_has
from rftkit.inputs import InputError
from rftkit.overrides import CHECKPOINTING_KEY, write_yaml

PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"  # trinity.common.constants.PLUGIN_DIRS_ENV_VAR


_loaded_plugin_dirs: set[str] = set()


def use_plugins() -> None:
    """Make the Trinity plugins known here, where the config is validated: this project's, imported by
    name (`rftkit.trinity_plugins`, which Ray workers get through the worker hook), and those in the
    folders a user put in TRINITY_PLUGIN_DIRS, with Trinity's loader (as its actors will). Removes
    the copies of this project's plugins that earlier versions let Trinity leave in its package."""
    from trinity.utils import plugin_loader

    for path in trinity_plugins.remove_stale_copies(plugin_loader):
        print(f"removed {path}: a copy of this project's plugin that Trinity's actors would load", flush=True)
    trinity_plugins.load()
    dirs = [d for d in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if d]
    others = [d for d in dirs if d not in _loaded_plugin_dirs]
    if others:
        plugin_loader.load_plugin_from_dirs(others)
        _loaded_plugin_dirs.update(others)


def verl_version_from_metadata(trainer_module: ModuleType) -> None:
    """Make Trinity's `is_verl_legacy()` read verl's version from the package's metadata: the same answer,
    without importing verl (and torch's compiler through tensordict), seconds of every dry run."""
    def from_metadata(original):
        def is_verl_legacy() -> bool:
            from packaging.version import Version

            try:
                return Version(importlib.metadata.version("verl")) < Version("0.8.0")
            except importlib.metadata.PackageNotFoundError:
                return False
        return is_verl_legacy

    original = trainer_module.is_verl_legacy
    replace("checks.verl_version", trainer_module, "is_verl_legacy", from_metadata)
    package = sys.modules.get("trinity.trainer")  # which re-exports it
    if package is not None and getattr(package, "is_verl_legacy", None) is original:
        replace("checks.verl_version", package, "is_verl_legacy", lambda original: trainer_module.is_verl_legacy)


def kimi_patch_on_first_call(package: ModuleType) -> None:
    """Make Trinity's `kimi_vl_monkey_patch_decorator` decorate when the function is first called, not
    when its class is defined: it imports transformers to read its version, a second of every dry run,
    for a check that runs only on a GPU. The same decoration, later."""
    def on_first_call(original):
        def kimi_vl_monkey_patch_decorator(func):
            decorated = None

            @functools.wraps(func)
            def call(*args, **kwargs):
                nonlocal decorated
                if decorated is None:
                    decorated = original(func)
                return decorated(*args, **kwargs)
            return call
        return kimi_vl_monkey_patch_decorator

    replace("checks.kimi_on_first_call", package, "kimi_vl_monkey_patch_decorator", on_first_call)


NO_GPU_BANNER = "NO GPU DETECTED"  # the title of the box GPUMemoryValidator logs, as of Trinity-RFT 0.6.0


class DropNoGpuBanner(logging.Filter):
    """Drops a log record that holds Trinity's NO GPU DETECTED banner; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return NO_GPU_BANNER not in record.getMessage()


@contextlib.contextmanager
def no_gpu_banner(validator=None):
    """While this runs, Trinity-RFT 0.6.0's GPU memory check (`validator`) does not log its NO GPU DETECTED
    banner, an error that a dry run without GPUs expects; all else shows. Fails if the check has moved."""
    if validator is None:
        install("launcher")
        from trinity.common.config_validator import GPUMemoryValidator, validators

        validator = next((v for v in validators if isinstance(v, GPUMemoryValidator)), None)
    check = getattr(type(validator), "validate_trainer_memory_usage", None)
    if not (source_has(check, f'"{NO_GPU_BANNER}"') and source_has(check, "self.logger.error(")):
        raise RuntimeError(f"rftkit.trinity_config: Trinity's GPU memory check no longer logs its "
                           f"{NO_GPU_BANNER} banner as in Trinity-RFT 0.6.0, which no_gpu_banner was written for")
    drop = DropNoGpuBanner()
    validator.logger.addFilter(drop)  # on the logger, not its handlers: Trinity's get_logger() replaces those
    try:
        yield
    finally:
        validator.logger.removeFilter(drop)


def one_line(error: Exception) -> str:
    """Trinity's message for a setting it rejects, on one line.

    Trinity's loader passes on OmegaConf's message, whose key and config classes follow on lines of
    their own: it becomes "<key>: <first line>". Any other message has its lines joined.
    """
    cause = error.__cause__
    key = getattr(cause, "full_key", None) if isinstance(cause, OmegaConfBaseException) else None
    if key:
        return f"{key}: {str(error).splitlines()[0]}"
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


@contextlib.contextmanager
def logs_held():
    """Hold what is printed inside the block, Trinity's log lines included (its loggers print to the stdout of the
    moment each was made), in the StringIO it yields; every logger writes to the real stdout again after it."""
    import io
    import logging

    def stream_handlers():
        loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                          if isinstance(logger, logging.Logger))]
        return [handler for logger in loggers for handler in logger.handlers
                if isinstance(handler, logging.StreamHandler)]

    held, real = io.StringIO(), sys.stdout
    for handler in stream_handlers():
        if handler.stream is real:
            handler.setStream(held)
    try:
        with contextlib.redirect_stdout(held):
            yield held
    finally:
        for handler in stream_handlers():
            if handler.stream is held:
                handler.setStream(real)


def known_names(message: str) -> str:
    """For Trinity's "Invalid module key: NAME" (a selector, workflow, algorithm... it has no such entry for): the
    names of the registry that holds the closest one, with that one suggested; else ""."""
    import difflib

    from trinity.utils.registry import Registry

    found = re.fullmatch(r".*Invalid module key: (\S+)", message)
    if not found:
        return ""
    registries = [value for name, module in list(sys.modules.items()) if name.startswith("trinity.")
                  for value in vars(module).values() if isinstance(value, Registry)]
    names = {registry.name: sorted({*registry.modules, *getattr(registry, "_default_mapping", {})})
             for registry in registries}
    every = [name for listed in names.values() for name in listed]
    closest = difflib.get_close_matches(found[1], every, n=1, cutoff=0.5)
    if not closest:
        return ""
    registry = next(name for name, listed in names.items() if closest[0] in listed)
    return f"; did you mean {closest[0]}? Trinity's {registry}: {', '.join(names[registry])}"


def source_of(message: str, set_values: list[tuple[str, Any]]) -> str | None:
    """The `--set KEY=VALUE` a message of Trinity's is about: the last one whose key the message starts with, or
    whose text value it quotes as a word (Trinity names an unknown registry entry by its value); else None."""
    for key, value in reversed(list(set_values)):
        quoted = isinstance(value, str) and re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", message)
        if message.startswith(f"{key}:") or quoted:
            return f"--set {key}={value}"
    return None


def build_trinity_config(config_path: str | Path, workflow_func: Callable, judge_func: Callable | None = None):
    """The validated Trinity config tune() would run for this YAML and these functions."""
    use_plugins()
    install("launcher")
    from agentscope.tuner import check_judge_function, check_workflow_function
    from agentscope.tuner._config import _to_trinity_config  # the conversion tune() itself calls

    check_workflow_function(workflow_func)
    if judge_func is not None:
        check_judge_function(judge_func)
    config = _to_trinity_config(config_path=str(config_path), workflow_func=workflow_func, judge_func=judge_func)
    return config.check_and_update()


def validate(config: dict, workflow_func: Callable, judge_func: Callable | None = None,
             config_file: str = "the config", set_values: list[tuple[str, Any]] = ()):
    """Trinity's validated config for this YAML mapping, as tune() will build it, with no side effects.

    check_and_update() creates the run's folders, so it runs on a copy whose
    checkpoint root is a scratch folder; the run's own paths are then set back.
    A setting Trinity rejects ends the program with Trinity's message, on one line (`one_line`), after the
    `--set` it came with (of `set_values`) or else `config_file`.
    """
    with tempfile.TemporaryDirectory(prefix="rftkit-check-") as scratch, logs_held() as held:
        copy_in_scratch = dict(config, checkpoint_root_dir=scratch)
        try:
            trinity_config = build_trinity_config(write_yaml(copy_in_scratch, Path(scratch) / "config.yaml"),
                                                  workflow_func, judge_func)
        except (ValueError, AssertionError) as exc:  # how Trinity's loader and check_and_update() reject settings
            message = one_line(exc)
            raise InputError(f"{source_of(message, set_values) or config_file}: {message}{known_names(message)}") \
                from None
    sys.stdout.write(held.getvalue())  # valid: Trinity's notes on it, which a refusal leaves out
    trinity_config.checkpoint_root_dir = config["checkpoint_root_dir"]
    trinity_config.checkpoint_job_dir = trinity_config.get_checkpoint_job_dir()
    trinity_config.log.save_dir = os.path.join(trinity_config.checkpoint_job_dir, "log")
    job_dir = Path(trinity_config.checkpoint_job_dir)
    if not trinity_config.continue_from_checkpoint and job_dir.is_dir() and any(job_dir.iterdir()):
        # Trinity would rename the run with a timestamp; the launcher could then not find its logs.
        raise InputError(f"{job_dir} exists and continue_from_checkpoint is false: remove it, "
                         f"choose another name (--set name=...), or set continue_from_checkpoint: true")
    return trinity_config


def summarize(config, attention_reason: str = "", liger_reason: str = "", lora_line: str | None = None) -> str:
    """A readable account of what a validated Trinity config will run; `attention_reason` and
    `liger_reason` say why the trainer's attention and layers are the ones they are; `lora_line` is
    `rftkit.lora.describe`'s (None: the whole model is trained)."""
    rollout = config.explorer.rollout_model
    explorer_input = config.buffer.explorer_input
    lines = [
        f"experiment      {config.project}/{config.name} (mode {config.mode})",
        f"model           {config.model.model_path}"
        + ("" if Path(config.model.model_path).exists() else " (a hub id: not checked here, fetched at launch)"),
        f"  lengths       max_model_len {config.model.max_model_len}, "
        f"prompt {config.model.max_prompt_tokens}, response {config.model.max_response_tokens}; "
        f"temperature {config.model.temperature}",
        f"algorithm       {config.algorithm.algorithm_type}: group {config.algorithm.repeat_times}, "
        f"batch {config.buffer.batch_size} tasks ({config.buffer.train_batch_size} experiences), "
        f"lr {config.algorithm.optimizer.lr}",
        f"  advantage     {config.algorithm.advantage_fn} {config.algorithm.advantage_fn_args}",
        f"  policy loss   {config.algorithm.policy_loss_fn}; KL loss {config.algorithm.kl_loss_fn} "
        f"{config.algorithm.kl_loss_fn_args}; grad clip {config.trainer.grad_clip}",
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
    replay = config.buffer.trainer_input.experience_buffer.replay_buffer
    # Trinity's priority queue puts an experience back only after reuse_cooldown_time; unset, it is read once
    order = f"read by {replay.priority_fn} priority {replay.priority_fn_args}, " if replay.enable else ""
    reuse = ("each read once" if not replay.enable or replay.reuse_cooldown_time is None
             else f"read again {replay.reuse_cooldown_time} s after each read")
    lines.append(f"experiences     {config.buffer.trainer_input.experience_buffer.storage_type}, {order}{reuse}")
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
        + f", Ulysses sequence parallel {config.trainer.ulysses_sequence_parallel_size}"
        # without padding removal every row is padded to the micro-batch's longest: more than the budget
        + ("" if config.trainer.use_remove_padding else ", each row padded to the micro-batch's longest"),
        f"rollout         openai api {rollout.enable_openai_api}, history {rollout.enable_history}, "
        f"tool parser {rollout.tool_call_parser}, runners/engine {config.explorer.runner_per_model}"
        + (f", each playing up to {config.explorer.max_repeat_times_per_runner or config.algorithm.repeat_times}"
           " episodes at once"
           if config.explorer.concurrent_mode == "asynchronous" else ", one episode at a time each"),
        f"start-up        {start_up(config)}",
        f"sync            {config.synchronizer.sync_method.value}, every {config.synchronizer.sync_interval} step(s)",
        f"checkpoints     {config.checkpoint_job_dir}, every {config.trainer.save_interval} steps",
        f"monitor         {config.monitor.monitor_type}",
        f"attention       {attention.describe({'trainer': vars(config.trainer)})}",
    ]
    if attention_reason:
        lines.append(f"  chosen by     {attention_reason}")
    lines.append(f"trainer layers  {liger.describe({'trainer': vars(config.trainer)})}")
    if liger_reason:
        lines.append(f"  chosen by     {liger_reason}")
    lines.append(f"trainer engine  {trainer_engine(config)}")
    lines.append(f"trained         {lora_line or 'the whole model'}")
    lines.append(f"reference model {reference_placement(config)}")
    return "\n".join(lines)


def trainer_engine(config) -> str:
    """verl's sharding of the trainer's models and its activation checkpointing."""
    strategy = config.trainer.trainer_strategy
    checkpointing = configured({"trainer": vars(config.trainer)}, CHECKPOINTING_KEY) is not False
    return (f"verl {dict(fsdp='FSDP1', fsdp2='FSDP2').get(strategy, strategy)}, "
            f"activation checkpointing {'on' if checkpointing else 'off'}")


def start_up(config) -> str:
    """The launch's start-up switches as the workers will get them, and how the engines compile."""
    from rftkit.cluster import fast_start_switches

    switches = ", ".join(f"{name}={value}" for name, value in fast_start_switches().items())
    compilation = (config.explorer.rollout_model.extra_engine_args or {}).get("compilation_config")
    engine = f"compilation {dict(compilation)}" if compilation else "vLLM's default compilation"
    return f"{switches}; engines: {engine}"


def reference_placement(config) -> str:
    """The reference model's weights: dtype, and where rftkit.trainer.ref_model leaves them."""
    ref = (config.trainer.trainer_config or {}).get("ref", {}).get("fsdp_config", {})
    offload = ref.get("param_offload", config.trainer.param_offload)
    return (f"{ref.get('model_dtype', 'fp32')} weights, "
            + ("on the CPU, copied in for every micro-batch (param_offload)" if offload else "on the GPU"))


def _name(func: Callable | None) -> str:
    return "none" if func is None else f"{func.__module__}.{func.__qualname__}"
