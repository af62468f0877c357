"""The real size each example's default config is written for: what the GPU measurements of a step
(experiments/step_cost) and of the trainer alone (experiments/trainer_speed) build. An example without a scale
here is not measured by them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    architecture: str  # the model's shape, a key of runkit.tiny_model's ARCHITECTURES
    response_tokens: int  # a reply's length cap in a measured launch
    full_run_steps: int  # explore steps of a full run, which a step's cost is multiplied by
    trainer_batch: int  # experiences in one trainer step
    prompt_tokens: tuple[int, int]  # the range of an experience's prompt length, in tokens
    reply_tokens: tuple[int, int]  # and of its reply
    padded_budget: int  # the micro-batch, in tokens, that the padded attention path fits on one H200
    # and the packed path with the logits held whole (without verl's fused log-prob kernel), where that is less
    # than the shipped config's budget; None: the shipped budget fits
    unfused_budget: int | None = None


SCALES = {
    # Qwen2.5-3B, upstream's model; a prompt of 280 to 480 tokens (the map, the rules, the moves so far)
    # and one move a reply; 700 explore steps, upstream's curve
    "frozenlake": Scale(architecture="Qwen2.5-3B", response_tokens=256, full_run_steps=700, trainer_batch=64,
                        prompt_tokens=(280, 480), reply_tokens=(16, 256), padded_budget=4096),
    # Qwen3-0.6B, upstream's model, with replies up to the config's 4,096 tokens; 200 explore steps;
    # the config's 49,152-token micro-batches fit one H200 only with verl's fused log-prob kernel; with the
    # logits held whole, half of that; padded, a quarter
    "math": Scale(architecture="Qwen3-0.6B", response_tokens=4096, full_run_steps=200, trainer_batch=16,
                  prompt_tokens=(100, 300), reply_tokens=(512, 4096), padded_budget=12288, unfused_budget=24576),
}
