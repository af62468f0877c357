"""What the trainer benchmark runs: each example's batch shape and config, and the settings compared."""

from __future__ import annotations

import random
from pathlib import Path

from experiments.scales import SCALES
from rftkit import lora
from rftkit.patches import CHECKPOINT_EVERY_ENV, COMPILE_LAYERS_ENV
from rftkit.keys import (CHECKPOINTING_KEY, FUSED_BACKEND_KEY, FUSED_KEY, LIGER_KEY, OPTIMIZER_ARGS_KEY,
                         PADDING_KEY, REF_DTYPE_KEY, REF_OFFLOAD_KEY, RESHARD_KEY, STRATEGY_KEY)
from runkit.examples import EXAMPLES

# verl's fused log-prob kernel on Triton; with liger, the math configs' trainer
FUSED = {FUSED_KEY: True, FUSED_BACKEND_KEY: "triton"}
LIGER_FUSED = {LIGER_KEY: True, **FUSED}

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
# name -> --attn; the first worker setup (verl's row-by-row log-probs, Trinity's own weight sync: fp32,
# pickled); the weight sync timed; more overrides. Each runs at the micro-batch budget of `budget`, below.
SETTINGS = {
    # the trainer as the project first ran it: padded, row-by-row log-probs, fp32 reference, fp32 sync
    "before": dict(attn="sdpa", old_setup=True, sync=True, overrides={REF_DTYPE_KEY: "fp32"}),
    # padded, log-probs in blocks (rftkit.trainer.logprobs): what the others' log-probs are checked against
    "sdpa-blocks": dict(attn="sdpa", old_setup=False, sync=False, overrides={}),
    # packed on PyTorch's varlen kernels, bf16 reference on the GPU: the launcher's default without flash-attn
    # and without liger-kernel
    "varlen": dict(attn="varlen", old_setup=False, sync=True, overrides={}),
    "varlen-32k": dict(attn="varlen", old_setup=False, sync=False, overrides={"trainer.max_token_len_per_gpu": 32768}),
    # varlen cut into micro-batches of at most 128 tokens: on the CPU test's batch, several, whose gradient must be
    # the one micro-batch's (rftkit.trainer.loss_scale); too small for the GPU scales' sequences
    "varlen-128": dict(attn="varlen", old_setup=False, sync=False, overrides={"trainer.max_token_len_per_gpu": 128}),
    # the default, with the reference model where verl puts it (rftkit.trainer.ref_model): on the CPU
    "varlen-ref-cpu": dict(attn="varlen", old_setup=False, sync=False, overrides={REF_OFFLOAD_KEY: True}),
    # varlen with verl's levers: liger-kernel's fused layers (the launcher's default where liger-kernel is
    # installed, rftkit.trainer.liger); no activation checkpointing; both
    "liger": dict(attn="varlen", old_setup=False, sync=False, overrides={LIGER_KEY: True}),
    "varlen-no-ckpt": dict(attn="varlen", old_setup=False, sync=False, overrides={CHECKPOINTING_KEY: False}),
    "liger-no-ckpt": dict(attn="varlen", old_setup=False, sync=False,
                          overrides={LIGER_KEY: True, CHECKPOINTING_KEY: False}),
    # liger with verl's fused log-probs (Triton): the math configs' trainer; liger alone at the math configs'
    # budget, which it fits without the fused kernel
    "liger-fused": dict(attn="varlen", old_setup=False, sync=False, overrides=LIGER_FUSED),
    # math's default without activation checkpointing: with the fused kernel its peak is far below the GPU's
    "liger-fused-no-ckpt": dict(attn="varlen", old_setup=False, sync=False,
                                overrides={**LIGER_FUSED, CHECKPOINTING_KEY: False}),
    # each default without the actor's second weight gathering per layer (RESHARD_KEY): one rank holds the whole
    # model anyway, so what it costs is one bf16 copy of the weights
    "liger-fused-no-reshard": dict(attn="varlen", old_setup=False, sync=False,
                                   overrides={**LIGER_FUSED, RESHARD_KEY: False}),
    "liger-no-reshard": dict(attn="varlen", old_setup=False, sync=False,
                             overrides={LIGER_KEY: True, RESHARD_KEY: False}),
    # math's default with torch's fused AdamW (one kernel over all the parameters) for its per-list foreach one
    "liger-fused-adamw": dict(attn="varlen", old_setup=False, sync=False,
                              overrides={**LIGER_FUSED, OPTIMIZER_ARGS_KEY: {"fused": True}}),
    # each default, and varlen, on FSDP1 (STRATEGY_KEY): the optimizer and the gradient clipping see a few dozen
    # flat plain tensors where FSDP2 gives them one DTensor a weight; with the weight sync timed, as it gathers
    # through verl's FSDP1 state dict
    "liger-fused-fsdp1": dict(attn="varlen", old_setup=False, sync=True,
                              overrides={**LIGER_FUSED, STRATEGY_KEY: "fsdp"}),
    "liger-fsdp1": dict(attn="varlen", old_setup=False, sync=True, overrides={LIGER_KEY: True, STRATEGY_KEY: "fsdp"}),
    "varlen-fsdp1": dict(attn="varlen", old_setup=False, sync=True, overrides={STRATEGY_KEY: "fsdp"}),
    "liger-48k": dict(attn="varlen", old_setup=False, sync=False,
                      overrides={LIGER_KEY: True, "trainer.max_token_len_per_gpu": 49152}),
    # the fused log-probs with each decoder layer compiled instead of liger's layers (rftkit.trainer.layer_levers,
    # asked for through the environment; it refuses liger's layers, which dynamo cannot trace when checkpointed)
    "fused-compile": dict(attn="varlen", old_setup=False, sync=False,
                          overrides={LIGER_KEY: False, **FUSED},
                          env={COMPILE_LAYERS_ENV: "1"}),
    # liger with gradient checkpointing on every other decoder layer only (rftkit.trainer.layer_levers): between
    # `liger` and `liger-no-ckpt`, in speed and in memory
    "liger-ckpt-half": dict(attn="varlen", old_setup=False, sync=False, overrides={LIGER_KEY: True},
                            env={CHECKPOINT_EVERY_ENV: "2"}),
    # varlen training a LoRA adapter of the launcher's defaults (rftkit.lora) instead of the whole model; its sync
    # is the adapter written for the engine (rftkit.trainer.lora_saves), and a full checkpoint is saved and loaded
    "varlen-lora": dict(attn="varlen", old_setup=False, sync=True, overrides=lora.overrides(lora.DEFAULT_RANK, None,
                                                                                            None)),
    # varlen, then a full checkpoint saved as the trainer saves one, HF copy included: its seconds and bytes beside
    # rftkit.needs.disk's estimate (not among the defaults: for Qwen2.5-3B that is about 50 GB written)
    "varlen-save": dict(attn="varlen", old_setup=False, sync=True, save=True, overrides={}),
    "liger-lora": dict(attn="varlen", old_setup=False, sync=True,
                       overrides={LIGER_KEY: True, **lora.overrides(lora.DEFAULT_RANK, None, None)}),
}
# what runs without --settings: the old and the new, and for FrozenLake, whose 3B model makes the reference
# pass and the micro-batch budget count, both variants of the new
DEFAULT_SETTINGS = ["before", "sdpa-blocks", "varlen"]
MORE_SETTINGS = {"frozenlake": ["varlen-ref-cpu", "varlen-32k"]}


def lengths(example: str, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt, reply) token counts of the example's benchmark batch, the same in every process."""
    scale = SCALES[example]
    rng = random.Random(seed)
    return [(rng.randint(*scale.prompt_tokens), rng.randint(*scale.reply_tokens)) for _ in range(scale.trainer_batch)]


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


def shipped_budget(example: str) -> int:
    """The example's shipped config's micro-batch budget, in tokens."""
    from rftkit.overrides import load_yaml

    return load_yaml(EXAMPLES[example].config_path())["trainer"]["max_token_len_per_gpu"]


def unfused_budget(example: str) -> int:
    """The budget the packed path fits with the logits held whole: the shipped one, or less (Scale.unfused_budget)."""
    shipped = shipped_budget(example)
    return min(shipped, SCALES[example].unfused_budget or shipped)


def budget(example: str, setting: str) -> int:
    """The micro-batch budget a setting runs at: its own where it names one; padded, what the padded path fits;
    with verl's fused log-prob kernel, the shipped config's; without it, what holding the logits whole allows."""
    from rftkit.trainer import attention

    chosen = SETTINGS[setting]
    if "trainer.max_token_len_per_gpu" in chosen["overrides"]:
        return chosen["overrides"]["trainer.max_token_len_per_gpu"]
    if not attention.overrides(chosen["attn"])[PADDING_KEY]:
        return SCALES[example].padded_budget
    return shipped_budget(example) if chosen["overrides"].get(FUSED_KEY) else unfused_budget(example)


def trinity_config(example: str, model: Path, work: Path, setting: str):
    """Trinity's validated config for the example's shipped YAML, as the launcher builds it on one GPU."""
    from rftkit import cluster
    from rftkit.trainer import attention
    from rftkit.overrides import load_yaml, resolve_config
    from rftkit.trinity_config import validate

    described, chosen = EXAMPLES[example], SETTINGS[setting]
    config_path = described.config_path()
    # The train batch is the benchmark's batch: one optimizer step per trainer step, as in a launch. Each
    # setting says itself whether it uses verl's fused log-prob kernel, whatever the shipped YAML asks for.
    overrides = {"model.model_path": str(model), "checkpoint_root_dir": str(work / "checkpoints"),
                 "buffer.train_batch_size": SCALES[example].trainer_batch, FUSED_KEY: False,
                 **attention.overrides(chosen["attn"]), **chosen["overrides"],
                 "trainer.max_token_len_per_gpu": budget(example, setting)}
    config = cluster.with_plan(resolve_config(load_yaml(config_path), overrides, config_path.name),
                               cluster.plan_cluster(1, 1, 1, None))
    lora.adapter_saves(config)  # as the launcher does, where the setting trains an adapter
    lora.fp32_adapter(config)
    lora.use_initial_adapter(config)
    lora.write_initial_adapter(config)
    return validate(config, described.workflow, described.judge)
