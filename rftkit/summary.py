"""The dry run's account of a validated Trinity config: what the run will train, on what, and how."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from rftkit import patches
from rftkit.needs.memory import checkpointing, reference_offloaded, uses_reference
from rftkit.trainer import attention, liger

# What a dry run does not check, each with where it is checked instead; printed with its summary.
NOT_CHECKED = (
    "the GPUs' memory beyond the trainer's estimate above (the engine's is vLLM's, at its start)",
    "that vLLM starts with this model and these engine arguments (the launch's first minutes)",
    "the workflow on a task (scripts/evaluate.py plays some)",
    "arguments a plugin hands on to other code (through its **kwargs)",
    "hub model ids and datasets, which the launch fetches",
)

def summarize(config, attention_reason: str = "", liger_reason: str = "", lora_line: str | None = None,
              memory_lines: tuple[str, str] | None = None, disk_line: str | None = None) -> str:
    """A readable account of what a validated Trinity config will run; `attention_reason` and
    `liger_reason` say why the trainer's attention and layers are the ones they are; `lora_line` is
    `rftkit.lora.describe`'s (None: the whole model is trained); `memory_lines` the trainer's memory estimate
    and how it stands on the card (`rftkit.launch.check_memory`); `disk_line` what the checkpoints take on disk
    (`rftkit.needs.disk.describe`)."""
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
        + ("" if config.trainer.use_remove_padding else ", each row padded to the micro-batch's longest")
        + f"; {micro_batch_weighting()}",
        f"rollout         openai api {rollout.enable_openai_api}, history {rollout.enable_history}, "
        f"tool parser {rollout.tool_call_parser}, prefix caching {'on' if rollout.enable_prefix_caching else 'off'}, "
        f"{in_flight(config)}",
        f"start-up        {start_up(config)}",
        f"sync            {sync(config)}",
        f"checkpoints     {config.checkpoint_job_dir}, every {config.trainer.save_interval} steps",
        *([f"  on disk       {disk_line}"] if disk_line else []),
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
    if memory_lines:
        lines += [f"memory          {memory_lines[0]}", f"  on the GPU    {memory_lines[1]}"]
    return "\n".join(lines)


def in_flight(config) -> str:
    """Runners per engine and how many of a step's episodes an engine has going at once: Trinity's checker caps
    an asynchronous engine's runners at its maps per step, so a small batch leaves the engine mostly idle unless
    each runner plays more of a map's rollouts at once (explorer.max_repeat_times_per_runner). A runner takes
    its next task only when the slowest rollout of its task ends, so a step waits on its slowest tasks unless
    explorer.over_rollout lets it end without them."""
    explorer, group = config.explorer, config.algorithm.repeat_times
    runners = explorer.runner_per_model
    if explorer.concurrent_mode != "asynchronous":
        line = f"runners/engine {runners}, one episode at a time each"
    else:
        each = min(explorer.max_repeat_times_per_runner or group, group)
        step = math.ceil(config.buffer.batch_size / explorer.rollout_model.engine_num) * group
        line = (f"runners/engine {runners}, each playing up to {each} episodes at once: "
                f"{min(runners * each, step)} of a step's {step} episodes per engine in flight")
    over = explorer.over_rollout
    if over.ratio > 0:  # Trinity's explorer waits for ceil(batch x (1 - ratio)) tasks
        tasks = config.buffer.batch_size
        rest = "kept where some rollouts ended" if over.return_partial_tasks else "dropped"
        line += (f"; a step ends {over.wait_after_min:g} s after {math.ceil(tasks * (1 - over.ratio))} of its "
                 f"{tasks} tasks are done, the rest {rest} (explorer.over_rollout)")
    return line


def sync(config) -> str:
    """How the engines get the trainer's weights, and how far behind them the rollouts may run: the levers
    between a colocated step's explorer and trainer waiting for each other."""
    synchronizer = config.synchronizer
    style = getattr(synchronizer.sync_style, "value", synchronizer.sync_style)
    if style == "fully_async":
        return (f"{synchronizer.sync_method.value}, fully asynchronous: the explorer keeps up to "
                f"{config.explorer.max_inflight_batches} steps in flight and takes each new version as it comes")
    line = f"{synchronizer.sync_method.value}, every {synchronizer.sync_interval} step(s)"
    if style != "fixed":
        line += f", style {style}"
    if synchronizer.sync_offset:
        line += f", the explorer {synchronizer.sync_offset} step(s) ahead of the trainer (off-policy by as much)"
    return line


def trainer_engine(config) -> str:
    """verl's sharding of the trainer's models, its activation checkpointing, and an adapter's dtype
    (rftkit.lora.fp32_adapter)."""
    strategy = config.trainer.trainer_strategy
    line = (f"verl {dict(fsdp='FSDP1', fsdp2='FSDP2').get(strategy, strategy)}, "
            f"activation checkpointing {'on' if checkpointing(config) else 'off'}")
    if config.model.lora_configs:
        line += (", the adapter and its optimizer states in fp32" if strategy == "fsdp" else
                 ", the adapter and its optimizer states in bf16 (Trinity-RFT's cast under FSDP2)")
    return line


def micro_batch_weighting() -> str:
    """How the trainer's micro-batches add up to a batch's loss (rftkit.trainer.loss_scale)."""
    if patches.PATCHES["loss.micro_batch_share"].switch.on():
        return "each weighted by its share of the batch's tokens"
    return (f"each its own mean, added up ({patches.MICRO_BATCH_SHARE_ENV}=0, Trinity-RFT's: the gradient grows "
            f"with their number)")


def start_up(config) -> str:
    """The launch's start-up switches as the workers will get them, and how the engines compile."""
    from rftkit.cluster import fast_start_switches

    switches = ", ".join(f"{name}={value}" for name, value in fast_start_switches().items())
    compilation = (config.explorer.rollout_model.extra_engine_args or {}).get("compilation_config")
    engine = f"compilation {dict(compilation)}" if compilation else "vLLM's default compilation"
    return f"{switches}; engines: {engine}"


def reference_placement(config) -> str:
    """The reference model's weights: dtype, and where rftkit.trainer.ref_model leaves them; or why there is none."""
    if not uses_reference(config):
        return f"none ({config.algorithm.algorithm_type} uses no reference model)"
    if config.model.lora_configs:
        return "the trained model with its adapter off (verl keeps no reference copy with LoRA)"
    ref = (config.trainer.trainer_config or {}).get("ref", {}).get("fsdp_config", {})
    return (f"{ref.get('model_dtype', 'fp32')} weights, "
            + ("on the CPU, copied in for every micro-batch (param_offload)" if reference_offloaded(config)
               else "on the GPU"))


def _name(func: Callable | None) -> str:
    return "none" if func is None else f"{func.__module__}.{func.__qualname__}"
