"""The trainer's GPU memory, estimated before a launch and checked against the card's.

Trinity-RFT 0.6.0 has an estimate (`GPUMemoryValidator`: the model and its optimizer under FSDP, the
activations with checkpointing, the logits), but runs it only for verl's legacy workers, in modes train and
both, and only where a GPU is: for this project's launches (verl 0.8's engine workers, colocate on one GPU)
it estimates nothing. Here its formulas run on the launch's config, with what they leave out: the reference
model, where the algorithm has one (Trinity assumes it offloaded; `rftkit.trainer.ref_model` keeps it on the
GPU), a LoRA run's frozen base (Trinity counts every parameter as trained; with an adapter verl computes the
reference's log-probs with the adapter off, so there is no reference model), an untied output layer (Trinity
counts the model without it), and the colocated engine's share of the card.

Against the peaks measured on GPUs the estimate errs both ways, in the activations; its part without them,
the model, its optimizer and the optimizer step, was never above a measured peak (docs/gpu.md, "What fits",
and tests/test_memory.py). So only that part refuses a launch, against all the memory the trainer has. A peak
over Trinity's own limit (80% of that memory, 90% with PyTorch's expandable segments) is a warning naming the
micro-batch budget that fits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from rftkit import keys
from rftkit.keys import CHECKPOINTING_KEY, FUSED_KEY, REF_DTYPE_KEY, REF_OFFLOAD_KEY

GIB = 2 ** 30
ACTOR_DTYPE_KEY = "trainer.trainer_config.actor.fsdp_config.model_dtype"  # fp32 unless set (Trinity's builder)
# Trinity-RFT's own switch for its memory check, which turns this one off too
OFF_KEY = "ignore_validator_suggestions"
TOKEN_STEP = 1024  # the micro-batch budgets a warning proposes are multiples of this


@dataclass
class Estimate:
    """Bytes a trainer GPU holds: `model` all along (weights, gradients, optimizer states, the reference model,
    a LoRA run's frozen base), then the larger of `activations` (at `tokens` a micro-batch; None where Trinity's
    formula does not apply) and the `optimizer_step`'s temporaries."""
    model: float
    reference: float
    optimizer_step: float
    activations: float | None
    tokens: int

    @property
    def floor(self) -> float:
        """What no micro-batch budget lowers: the model and its optimizer step."""
        return self.model + self.optimizer_step

    @property
    def peak(self) -> float | None:
        return None if self.activations is None else self.model + max(self.activations, self.optimizer_step)


FORMULAS = ("_get_model_params_num_and_config", "_calc_params_memory_and_dtype_coeff", "_calc_fsdp_activation_memory")


def _missing_formulas() -> list[str]:
    """The methods of Trinity's memory validator this module runs that the installed Trinity lacks."""
    from trinity.common.config_validator import GPUMemoryValidator

    return [name for name in FORMULAS if not hasattr(GPUMemoryValidator, name)]


def _validator():
    """Trinity's memory validator, whose formulas this module runs; a RuntimeError if they moved."""
    from trinity.common.config_validator import GPUMemoryValidator

    missing = _missing_formulas()
    if missing:
        from importlib.metadata import version

        raise RuntimeError(f"rftkit.needs.memory: Trinity-RFT {version('trinity-rft')}'s GPUMemoryValidator has no "
                           f"{', '.join(missing)} (written for 0.6.0); set {OFF_KEY}: true to launch without the "
                           f"memory estimate")
    return GPUMemoryValidator()


def _trainer(config) -> dict:
    return {"trainer": vars(config.trainer)}


def reference_offloaded(config) -> bool:
    """Whether the reference model's weights stay on the CPU (its own param_offload, else the trainer's)."""
    trainer = _trainer(config)
    return bool(keys.get(trainer, REF_OFFLOAD_KEY, config.trainer.param_offload))


def estimate(config, trainable: int | None = None) -> Estimate | None:
    """The estimate for a validated Trinity config, or None where there is none: the model is not a local folder,
    or the trainer is not FSDP's, or the check is off and Trinity's formulas moved. `trainable` is a LoRA
    adapter's parameter count (None: the whole model)."""
    params = model_parameters(config)
    if params is None:
        return None
    trainer = _trainer(config)
    gpus = max(1, config.cluster.trainer_gpu_num)
    fsdp = SimpleNamespace(  # Trinity's own FSDP settings for verl's engine (bf16), with what the config changes
        mixed_precision={}, dtype="bfloat16", fsdp_size=gpus, offload_policy=config.trainer.offload_policy,
        optimizer_offload=config.trainer.optimizer_offload,
        reshard_after_forward=keys.get(trainer, keys.RESHARD_KEY, True))
    running, _, step, _ = _validator()._calc_params_memory_and_dtype_coeff(
        params if trainable is None else trainable, config.trainer.trainer_strategy, fsdp)
    if trainable is None:
        reference = (0.0 if reference_offloaded(config) or not uses_reference(config)
                     else _bytes_each(trainer, REF_DTYPE_KEY) * params / gpus)
        frozen = 0.0
    else:
        reference, frozen = 0.0, _bytes_each(trainer, ACTOR_DTYPE_KEY) * params / gpus
    tokens = config.trainer.max_token_len_per_gpu
    return Estimate(model=running + frozen + reference, reference=reference, optimizer_step=step,
                    activations=_activations(config, tokens) if checkpointing(config) else None, tokens=tokens)


def checkpointing(config) -> bool:
    """Whether verl checkpoints the trainer's activations (on unless the config turns it off); Trinity's
    activation formula assumes it."""
    return keys.get(_trainer(config), CHECKPOINTING_KEY) is not False


def uses_reference(config) -> bool:
    """Whether the algorithm has verl build a reference model (its `use_reference`)."""
    from trinity.algorithm import ALGORITHM_TYPE

    return bool(getattr(ALGORITHM_TYPE.get(config.algorithm.algorithm_type), "use_reference", True))


def model_parameters(config) -> int | None:
    """The model's parameter count (its output layer included where it is not tied to the embedding), as Trinity's
    validator reads it; None where the estimates have none: the model is not a local folder, or the trainer is not
    FSDP's, or transformers cannot build the shape here, or the check is off and Trinity's formulas moved."""
    if not (Path(config.model.model_path) / "config.json").is_file() \
            or not config.trainer.trainer_strategy.startswith("fsdp") \
            or (config.ignore_validator_suggestions and _missing_formulas()):
        return None
    try:
        return _model(config)[0]
    except (ValueError, KeyError, AssertionError, ImportError):  # a shape transformers cannot build here
        return None


def actor_weight_bytes(config) -> int:
    """Bytes a weight of the trained model takes on the trainer (its `model_dtype`, fp32 unless set)."""
    return _bytes_each(_trainer(config), ACTOR_DTYPE_KEY)


def _bytes_each(trainer: dict, dtype_key: str) -> int:
    """Bytes a weight takes in the dtype at `dtype_key` (fp32 unless set, as Trinity's builder leaves it)."""
    return 2 if "16" in str(keys.get(trainer, dtype_key, "fp32")) else 4


_models: dict[str, tuple] = {}


def _model(config) -> tuple[int, object]:
    """The model's parameter count and its (text) config, as Trinity's validator reads them, once per model."""
    path = config.model.model_path
    if path not in _models:
        params, hf_config = _validator()._get_model_params_num_and_config(path, config.model.trust_remote_code)
        text = getattr(hf_config, "text_config", None) or hf_config
        if not getattr(text, "tie_word_embeddings", True):  # Trinity counts AutoModel's, without the output layer
            params += text.vocab_size * text.hidden_size
        _models.clear()
        _models[path] = params, text
    return _models[path]


def _activations(config, tokens: int) -> float:
    """Trinity's activations at `tokens` a micro-batch (bf16 compute: its dtype coefficient 1)."""
    return _validator()._calc_fsdp_activation_memory(_model(config)[1], tokens, logits_kind(config), 1)


def logits_kind(config) -> str:
    """Trinity's name for how the trainer holds the logits: fused with the output layer, or whole."""
    if keys.get(_trainer(config), FUSED_KEY):
        return "fusion"
    return "normal-with-entropy" if config.algorithm.entropy_loss_fn != "none" else "normal-without-entropy"


def engine_share(config) -> float:
    """The share of a GPU the trainer leaves to a rollout engine: colocated, the engine's memory; else none."""
    return config.explorer.rollout_model.gpu_memory_utilization if config.mode == "colocate" else 0.0


def limit_share() -> float:
    """Trinity's limit on a trainer's estimate, as a share of its memory: the rest is the allocator's and CUDA's."""
    return 0.9 if os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") == "expandable_segments:True" else 0.8


def tokens_that_fit(config, found: Estimate, memory: float) -> int:
    """The largest micro-batch budget (a multiple of TOKEN_STEP, up to the config's) whose estimate stays within
    `memory` bytes; 0 if none does."""
    low, high = 0, found.tokens // TOKEN_STEP
    while low < high:  # the activations grow with the tokens
        middle = (low + high + 1) // 2
        if found.model + max(_activations(config, middle * TOKEN_STEP), found.optimizer_step) <= memory:
            low = middle
        else:
            high = middle - 1
    return low * TOKEN_STEP


def describe(found: Estimate | None) -> str:
    """The dry run's line for the estimate."""
    if found is None:
        return ("not estimated (the model is not a local folder, transformers cannot build its shape here, the "
                "trainer is not FSDP's, or the check is off and Trinity-RFT's formulas moved)")
    parts = f"model and optimizer {(found.model - found.reference) / GIB:.1f}" \
            + (f", reference model {found.reference / GIB:.1f}" if found.reference else "")
    step = f"optimizer step {found.optimizer_step / GIB:.1f}"
    if found.peak is None:
        return (f"the trainer holds {found.floor / GIB:.1f} GiB a GPU without its activations ({parts}, then the "
                f"{step}); activations not estimated: checkpointing is off (Trinity-RFT's formula assumes it on)")
    return (f"the trainer peaks at about {found.peak / GIB:.1f} GiB a GPU (Trinity-RFT's formula): {parts}, then "
            f"the larger of activations at {found.tokens:,} tokens a micro-batch {found.activations / GIB:.1f} and "
            f"the {step}")


def check(config, found: Estimate | None, card_gib: float | None) -> tuple[str, str | None]:
    """The dry run's line on the card, and the refusal (None: none) of a trainer that cannot fit it."""
    if found is None:
        return "not checked", None
    if card_gib is None:
        return "not checked: no GPU here (--gpu-memory GIB checks a card of that size)", None
    share = engine_share(config)
    memory = card_gib * GIB * (1 - share)
    has = (f"{memory / GIB:.1f} GiB of this {card_gib:.1f} GiB GPU"
           + (f" (the colocated engine keeps {share:.0%})" if share else ""))
    if found.floor > memory:
        refusal = (f"trainer memory: the model and its optimizer step need about {found.floor / GIB:.1f} GiB a GPU "
                   f"(Trinity-RFT's formula, reference model included), more than the trainer's {has}; train an "
                   f"adapter (--lora), plan more GPUs, or set trainer.offload_policy=true (FSDP2 keeps the model "
                   f"and its optimizer on the CPU; slower); --set {OFF_KEY}=true launches anyway (docs/gpu.md, "
                   f"\"What fits\")")
        return f"does not fit: {has}", None if config.ignore_validator_suggestions else refusal
    limit = limit_share() * memory
    if found.peak is None:
        return f"fits without its activations (not estimated): the trainer has {has}", None
    if found.peak <= limit:
        return f"fits: the trainer has {has}, Trinity's limit {limit_share():.0%} of it", None
    tokens = tokens_that_fit(config, found, limit)
    budget = (f"--set trainer.max_token_len_per_gpu={tokens} fits (it must hold the longest experience)" if tokens
              else "no micro-batch budget fits")
    return (f"may not fit: the peak is over Trinity's limit, {limit_share():.0%} of the trainer's {has}; by the "
            f"estimate (its error against measured peaks: docs/gpu.md, \"What fits\"), {budget}; or train an adapter "
            f"(--lora)"), None
