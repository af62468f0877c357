"""One setting of the trainer benchmark in this process: Trinity's trainer worker, its steps and a weight sync."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

from experiments.trainer_speed.profile import profiled
from experiments.trainer_speed.settings import PEAK_FLOPS, SETTINGS, experiences, lengths, trinity_config
from runkit.serving import free_port

def setup_worker_process(setting: str) -> None:
    """What Ray's worker setup hook does in a trainer process of a launch with this setting."""
    from rftkit import patches, workers
    from rftkit.patches.apply import install, install_one

    os.environ.update(SETTINGS[setting].get("env", {}))  # switches the hook reads (a launch's environment)
    if SETTINGS[setting]["old_setup"]:  # the hook as it was: verl's padding helpers only
        install_one("attention.torch_padding")
    else:
        os.environ[patches.WEIGHT_SYNC_DTYPE_ENV] = "bfloat16"  # as the launcher sets it for a colocated run
        workers.setup_colocated()
        install("trainer benchmark")  # the decoder-layer levers a setting asks for (layer_levers.py)


def synced(fn):
    """(result, seconds) of fn(), the GPU's queued work included."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - started


def run_setting(example: str, setting: str, model: Path, work: Path, steps: int, profile: bool = False) -> dict:
    """One setting's trainer steps and weight sync, in this process, set up for it by setup_worker_process; with
    `profile`, one more step under the profiler (`profile.py`)."""
    import ray
    import torch
    from trinity.manager.synchronizer import Synchronizer
    from trinity.trainer.verl.config import build_verl_config
    from trinity.trainer.verl.trainer import VERLTrainer
    from trinity.trainer.verl.utils import to_data_proto
    from trinity.trainer.verl.workers import TrinityActorRolloutRefWorker
    from trinity.utils.log import get_logger

    config = trinity_config(example, model, work, setting)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    verl_config = build_verl_config(config)
    worker = TrinityActorRolloutRefWorker(config=verl_config, role="actor_rollout_ref")
    (_, init_seconds) = synced(worker.init_model)
    worker.set_trinity_config(config.algorithm, config.explorer.rollout_model.engine_type, config.ray_namespace)
    # The trainer's own step functions, called on this process's worker instead of a Ray worker group. With an
    # adapter the reference model is the actor with its adapter off, as Trinity's VERLTrainer sets it.
    adapter = bool(config.model.lora_configs)
    trainer = SimpleNamespace(global_config=config, algorithm_config=config.algorithm, config=verl_config,
                              ref_in_actor=adapter, actor_rollout_wg=worker, ref_policy_wg=worker)
    tokenizer_pad = worker.actor.model_config.tokenizer.pad_token_id or 0
    vocab = worker.actor.model_config.hf_config.vocab_size
    batch_experiences = experiences(example, vocab)
    params = sum(p.numel() for p in worker.actor.engine.module.parameters())
    trainable = sum(p.numel() for p in worker.actor.engine.module.parameters() if p.requires_grad)

    reference_logprobs: list[float] = []

    def step() -> dict:
        batch = to_data_proto(batch_experiences, tokenizer_pad, None, get_logger("trainer_speed"))
        batch.meta_info["temperature"] = config.model.temperature
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]  # bypass_old_logprobs, Trinity's default
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        batch, ref_seconds = synced(lambda: VERLTrainer._compute_ref_log_prob(trainer, batch))
        if not reference_logprobs:  # the reference model's log-probs of every response token, for comparing settings
            mask = batch.batch["response_mask"].bool()
            reference_logprobs.extend(batch.batch["ref_log_prob"][mask].tolist())
        metrics: dict = {}
        _, update_seconds = synced(lambda: VERLTrainer._update_actor(trainer, batch, metrics))
        return {"reference log-probs (s)": ref_seconds, "update (s)": update_seconds,
                "peak allocated (GiB)":
                    torch.cuda.max_memory_allocated() / 2 ** 30 if torch.cuda.is_available() else 0.0,
                "verl's reported MFU of the update": metrics.get("perf/mfu/actor"),
                "gradient norm": metrics.get("actor/grad_norm")}

    tokens = sum(p + r for p, r in lengths(example))
    warm_up = step()
    timed = [step() for _ in range(steps)]
    ref = sum(s["reference log-probs (s)"] for s in timed) / steps
    update = sum(s["update (s)"] for s in timed) / steps
    import verl.utils.torch_functional as verl_functional

    from rftkit.patches.apply import applied
    from verl.utils.fsdp_utils import fsdp_version

    result = {
        "setting": setting, "attn": SETTINGS[setting]["attn"], "tokens per step": tokens, "parameters": params,
        "trainable parameters": trainable,
        # what actually ran, read back from the loaded model and from verl
        "attention loaded": worker.actor.engine.module.config._attn_implementation,
        # what a checkpoint's config.json would name (None: transformers' default wherever it is loaded)
        "attention in the checkpoint config": worker.actor.engine.module.config.to_dict().get("attn_implementation"),
        "padding removal": worker.actor.model_config.use_remove_padding,
        # verl keeps a forward-only model on the CPU and copies it in for every micro-batch, unless
        # rftkit.trainer.ref_model keeps it on the GPU
        "reference weights": "the actor's, adapter off" if adapter else "{} on {}".format(
            *next((p.dtype, p.device) for p in worker.ref.engine.module.parameters())),
        # FSDP2's offload policy, or FSDP1's CPUOffload
        "reference offloaded to the CPU": None if adapter else worker.ref.engine._uses_fsdp2_cpu_offload_policy
                                          or getattr(getattr(worker.ref.engine.module, "cpu_offload", None),
                                                     "offload_params", False),
        "FSDP version": fsdp_version(worker.actor.engine.module),
        "verl's log-prob fallback": "rftkit.trainer.logprobs.token_log_probs"
                                    if "logprobs.in_blocks" in applied(verl_functional.logprobs_from_logits_v2)
                                    else f"{verl_functional.logprobs_from_logits_v2.__module__}."
                                         f"{verl_functional.logprobs_from_logits_v2.__name__}",
        "model build and load (s)": init_seconds, "warm-up step": warm_up, "timed steps": timed,
        "reference log-probs (s)": ref, "update (s)": update, "trainer step (s)": ref + update,
        "trainer tokens/s": tokens / (ref + update),
        "reference pass tokens/s": tokens / ref, "update tokens/s": tokens / update,
        "MFU of a trainer step": (2 + 6) * params * tokens / (ref + update) / PEAK_FLOPS,
        "MFU of the update": 6 * params * tokens / update / PEAK_FLOPS,
        "peak allocated (GiB)": max(s["peak allocated (GiB)"] for s in [warm_up, *timed]),
        "micro-batch token budget": config.trainer.max_token_len_per_gpu,
        "reference log-probs of the first step": reference_logprobs,
    }

    if profile:
        try:
            _, result["profile"] = profiled(lambda: synced(step))
        except Exception as error:  # the profiler's own failure: the timed figures above still stand
            result["profile"] = {"error": f"the profiled step failed: {type(error).__name__}: {error}"}
    if not SETTINGS[setting]["sync"]:
        return result
    # One colocated weight sync, as Trinity's memory sync makes it; the Synchronizer's process set up as
    # the launcher's hook sets up every worker of a colocated run.
    from rftkit import patches, workers

    setup = {} if SETTINGS[setting]["old_setup"] else {
        "env_vars": {patches.WEIGHT_SYNC_DTYPE_ENV: "bfloat16"},
        "worker_process_setup_hook": f"{workers.setup_colocated.__module__}.{workers.setup_colocated.__name__}"}
    # address="local": a Ray of its own, even beside a launch's cluster (a name clash with its Synchronizer)
    ray.init(address="local", namespace=config.ray_namespace, include_dashboard=False, logging_level="ERROR",
             runtime_env=setup)
    if adapter:
        result.update(adapter_sync_and_resume(worker, config, work, trainable))
        ray.shutdown()
        return result
    # before the sync, whose worker would otherwise create one without a folder; held, or Ray ends it
    monitor = checkpoint_monitor(config) if SETTINGS[setting].get("save") else None
    holder = ray.remote(_Holder).remote()  # the Synchronizer watches the modules that use it
    synchronizer = ray.remote(Synchronizer).options(name="synchronizer", namespace=config.ray_namespace) \
        .remote(config, module_ref=holder)
    ray.get(synchronizer.add_module.remote(holder))
    _, upload = synced(lambda: worker.upload_state_dict(global_step=1))

    device = "cuda" if torch.cuda.is_available() else "cpu"

    def fetch() -> tuple[list, str, bool]:  # the engine's side: trinity/common/models/vllm_extension.py, memory sync
        names, dtypes, views = [], set(), None
        for ref_ in synchronizer.get_model_state_dict_iterator.remote():
            name, received = ray.get(ref_)
            if views is None:  # a view of the object store: a second get maps the same memory, a copy does not
                views = received.data_ptr() == ray.get(ref_)[1].data_ptr()
            tensor = received.to(device, non_blocking=True)
            names.append([name, list(tensor.shape)])
            dtypes.add(str(tensor.dtype))
        return names, ",".join(sorted(dtypes)), bool(views)

    (names, dtypes, views), engine_side = synced(fetch)
    result.update({"weight sync: trainer upload (s)": upload, "weight sync: engine fetch (s)": engine_side,
                   "weight sync (s)": upload + engine_side, "weight sync tensors": len(names),
                   # what the engine loads by: equal across settings of one model
                   "weight sync names and shapes (sha256)":
                       hashlib.sha256(json.dumps(sorted(names)).encode()).hexdigest(),
                   "weight sync dtypes": dtypes, "weight sync as object-store views": views})
    if monitor is not None:
        result.update(saved_checkpoint(worker, config, work, None)[1])
    ray.shutdown()
    return result


def adapter_sync_and_resume(worker, config, work: Path, trainable: int) -> dict:
    """A LoRA setting's sync, as Trinity's checkpoint sync makes it (the worker's `save_state_dict`, adapter-only
    through rftkit.trainer.lora_saves, with the checkpoint monitor told), and a full checkpoint (its model shard the
    adapter alone, lora_saves again) saved, then loaded into a second worker, which must hold the same adapter."""
    import ray
    import torch
    from trinity.trainer.verl.config import build_verl_config
    from trinity.trainer.verl.workers import TrinityActorRolloutRefWorker

    from rftkit.trainer.lora_saves import ADAPTER_FOLDER, is_adapter_key

    monitor = checkpoint_monitor(config)
    for step in (1, 2):  # the second is timed: the first also starts the worker's link to the monitor
        sync_dir = Path(config.checkpoint_job_dir) / f"global_step_{step}" / "actor"
        _, seconds = synced(lambda: worker.save_state_dict(str(sync_dir), global_step=step))
        # what Trinity's trainer does next: count the save it asked for, and watch the step
        ray.get(monitor.register_thread_count.remote(step, state_dict_thread_count=1))
        ray.get(monitor.monitor_step.remote(step, is_state_dict=True))
    written = sorted(str(p.relative_to(sync_dir)) for p in sync_dir.rglob("*") if p.is_file())
    checkpoint, saved = saved_checkpoint(worker, config, work, trainable)
    resumed = TrinityActorRolloutRefWorker(config=build_verl_config(config), role="actor_rollout_ref")
    resumed.init_model()
    resumed.load_checkpoint(str(checkpoint))

    def adapter_params(w) -> dict:
        return {name: p.detach().float().cpu() for name, p in w.actor.engine.module.named_parameters()
                if is_adapter_key(name)}

    before, after = adapter_params(worker), adapter_params(resumed)
    latest = Path(config.checkpoint_job_dir) / "latest_state_dict_iteration.txt"
    return {"weight sync (s)": seconds, "weight sync files": written,
            "weight sync bytes": sum(p.stat().st_size for p in (sync_dir / ADAPTER_FOLDER).rglob("*") if p.is_file()),
            "weight sync version the monitor recorded": latest.read_text() if latest.is_file() else None,
            "adapter trained (largest |B|)": max(float(t.abs().max()) for n, t in before.items() if "lora_B" in n),
            **saved, "adapter dtypes": sorted({str(p.dtype) for name, p in worker.actor.engine.module.named_parameters()
                                               if is_adapter_key(name)}),
            "optimizer state dtypes": sorted({str(v.dtype) for state in worker.actor.engine.optimizer.state.values()
                                              for v in state.values() if torch.is_tensor(v) and v.numel() > 1}),
            "resumed adapter equal": before.keys() == after.keys() and all(before[n].equal(after[n]) for n in before)}


def checkpoint_monitor(config):
    """Trinity's CheckpointMonitor actor, which the worker's saves report to, created before the worker looks it up
    by name."""
    import ray
    from trinity.trainer.verl.trainer import CheckpointMonitor

    monitor = CheckpointMonitor.get_actor(namespace=config.ray_namespace, save_strategy=config.trainer.save_strategy,
                                          default_local_dir=config.checkpoint_job_dir)
    ray.get(monitor.register_thread_count.remote(0))
    return monitor


def saved_checkpoint(worker, config, work: Path, trainable: int | None) -> tuple[Path, dict]:
    """A full checkpoint as the trainer saves its last one (the whole model's with its HF copy, unless the config
    asks for none), timed and measured, beside rftkit.needs.disk's estimate of it."""
    from rftkit.needs import disk

    checkpoint = work / "full-checkpoint"
    hf_copy = trainable is None and config.trainer.save_hf_checkpoint != "never"
    _, seconds = synced(lambda: worker.save_checkpoint(str(checkpoint), global_step=1, save_as_hf=hf_copy))
    estimate = disk.sizes(config, trainable)
    return checkpoint, {
        "full checkpoint save (s)": seconds,
        "full checkpoint bytes": sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file()),
        "full checkpoint model shard bytes": sum(p.stat().st_size for p in checkpoint.glob("model_world_size_*")),
        "full checkpoint bytes estimated (rftkit.needs.disk)": None if estimate is None else
        estimate.each + (estimate.hf_copy if hf_copy and estimate.hf_saves != "every" else 0.0)}


class _Holder:
    """A live actor for the Synchronizer to watch, standing for the Trainer actor of a launch."""

    def is_alive(self) -> bool:
        return True


