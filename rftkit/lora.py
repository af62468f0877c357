"""LoRA: train a low-rank adapter instead of the whole model, through Trinity-RFT's `model.lora_configs`.

`--lora [RANK]` (with `--lora-alpha` and `--lora-modules`) writes one adapter's settings there; a YAML or
`--set` may write them instead. Trinity then trains the adapter with verl and serves it with vLLM's
LoRA support. The defaults are Trinity-RFT's own `LoRAConfig` (rank 32, alpha 32, every linear layer
but the output layer); rank 32 is also rLLM's FrozenLake cookbook's, and "LoRA Without Regret"
(Thinking Machines, 2025) puts adapters on every layer at a fixed alpha of 32, with a learning rate
about 10 times the full model's.

Here: the settings checked (rank, alpha, modules the model has, a model vLLM serves with adapters),
the one line the summary prints (trainable parameters, counted by PEFT on the model's shape, with no
weights loaded), and the adapter vLLM starts with. Trinity builds that one by loading the whole
model on the CPU at every validation; the launcher writes it instead from the model's shape, all
zeros (the base model's outputs, as Trinity's has: its second matrix is zero), and marks it as
Trinity's own placeholder so that the trainer starts its adapter fresh.
"""

from __future__ import annotations

import re
from pathlib import Path

from rftkit.inputs import InputError, read_json
from rftkit import keys
from rftkit.keys import LORA_KEY, ORIG_PARAMS_KEY, STRATEGY_KEY
from rftkit.trainer.lora_saves import ADAPTER_FILE

DEFAULT_RANK, DEFAULT_ALPHA, DEFAULT_MODULES = 32, 32, "all-linear"
ADAPTER_NAME = "policy"  # the adapter's name in vLLM, where the YAML gives none
ADAPTER_FILES = ("adapter_config.json", ADAPTER_FILE)  # a PEFT adapter folder
DEFAULTS = {"lora_rank": DEFAULT_RANK, "lora_alpha": DEFAULT_ALPHA, "target_modules": DEFAULT_MODULES}
# verl's FSDP1 with the adapter's own parameters: what `fp32_adapter` gives an adapter run
FP32_ADAPTER = {STRATEGY_KEY: "fsdp", ORIG_PARAMS_KEY: True}


def overrides(rank: int | None, alpha: int | None, modules: list[str] | None) -> dict:
    """The config overrides of `--lora RANK --lora-alpha A --lora-modules M...` (none without --lora)."""
    if rank is None:
        if alpha is not None or modules:
            raise InputError("--lora-alpha, --lora-modules: they set the adapter of --lora, which was not given")
        return {}
    return {LORA_KEY: [{"lora_rank": rank, "lora_alpha": DEFAULT_ALPHA if alpha is None else alpha,
                        "target_modules": target_modules(modules)}]}


def target_modules(names: list[str] | None) -> str:
    """Trinity's `target_modules`, a string: all-linear (PEFT's and Trinity's word for every linear layer but
    the output layer), or a regular expression that PEFT matches against each layer's full name."""
    if not names or names == [DEFAULT_MODULES]:
        return DEFAULT_MODULES
    return r".*\.(" + "|".join(re.escape(name) for name in names) + ")"


def module_names(target: str) -> list[str] | None:
    """The layer names `target_modules` made `target`, or None for all-linear and any other expression."""
    found = re.fullmatch(r"\.\*\\\.\((.*)\)", target)
    return None if found is None else [re.sub(r"\\(.)", r"\1", name) for name in found.group(1).split("|")]


def adapter(config: dict) -> dict | None:
    """The one adapter a YAML mapping asks for, as it is there, or None (the whole model is trained)."""
    adapters = keys.get(config, LORA_KEY)
    if not adapters:
        return None
    if not isinstance(adapters, list) or len(adapters) != 1 or not isinstance(adapters[0], dict):
        raise InputError(f"{LORA_KEY}: expected a list of one adapter (Trinity-RFT trains one), got {adapters!r}")
    return adapters[0]


def settings_of(config: dict) -> dict | None:
    """`adapter`'s settings with Trinity's defaults where the YAML leaves one out."""
    found = adapter(config)
    return None if found is None else {**DEFAULTS, **found}


def check(config: dict) -> None:
    """Refuse adapter settings that no model can train or vLLM serve, and saves that cannot work with an adapter
    (`adapter_saves`)."""
    settings = settings_of(config)
    if settings is None:
        return
    if keys.get(config, "trainer.save_hf_checkpoint") in ("last", "always"):
        raise InputError("trainer.save_hf_checkpoint: with an adapter verl writes the wrapped model's weights into "
                         "huggingface/, which no loader reads as the model; leave it out: every checkpoint holds the "
                         "adapter in lora_adapter/ (scripts/merge_lora.py makes a model folder of it)")
    method = (config.get("synchronizer") or {}).get("sync_method")
    if method == "memory":
        raise InputError("synchronizer.sync_method: memory hands the engine the whole model, which an engine "
                         "serving a LoRA adapter does not load; leave it out (--lora syncs the adapter through "
                         "files) or set checkpoint")
    rank, alpha = settings["lora_rank"], settings["lora_alpha"]
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise InputError(f"{LORA_KEY}.0.lora_rank (--lora): expected a whole number of 1 or more, got {rank!r}")
    served = servable_ranks()
    if rank not in served:
        # Trinity-RFT gives its engine max_lora_rank = the rank, and vLLM takes only these
        raise InputError(f"{LORA_KEY}.0.lora_rank (--lora): vLLM serves adapters of rank "
                         f"{', '.join(map(str, served[:-1]))} or {served[-1]}; got {rank}")
    if not isinstance(alpha, int) or isinstance(alpha, bool) or alpha < 1:
        raise InputError(f"{LORA_KEY}.0.lora_alpha (--lora-alpha): expected a whole number of 1 or more, "
                         f"got {alpha!r}")


def servable_ranks() -> tuple[int, ...]:
    """The adapter ranks vLLM's engine can be started for (its `max_lora_rank` choices)."""
    import typing

    from vllm.config.lora import MaxLoRARanks

    return typing.get_args(MaxLoRARanks)


def check_adapter(folder: Path, flag: str) -> dict:
    """The settings of an adapter folder as PEFT saves one (adapter_config.json); an InputError naming `flag` where
    the folder is not one."""
    missing = [name for name in ADAPTER_FILES if not (folder / name).is_file()]
    if missing:
        raise InputError(f"{flag} {folder}: no {', '.join(missing)}; expected a LoRA adapter as PEFT saves one (a "
                         f"LoRA run's checkpoint holds it in global_step_N/actor/lora_adapter)")
    return read_json(folder / ADAPTER_FILES[0], flag=flag)


def adapter_saves(config: dict) -> None:
    """With an adapter: Trinity-RFT's checkpoint sync, made adapter-only (rftkit.trainer.lora_saves), since its vLLM
    engine loads the adapter from each sync's folder and the other methods write none there (NCCL, which Trinity
    replaces by the checkpoint sync for LoRA, and memory, which it gives one GPU); and no HF copy of the model in
    checkpoints, which verl would write with the adapter's wrapped names (`base_layer`), a folder no loader
    reads as the model. The adapter itself is in every checkpoint."""
    if adapter(config) is not None:
        config.setdefault("synchronizer", {})["sync_method"] = "checkpoint"
        config.setdefault("trainer", {})["save_hf_checkpoint"] = "never"


def fp32_adapter(config: dict) -> None:
    """With an adapter and no `trainer.trainer_strategy` set: `FP32_ADAPTER` (FSDP1 asked for by name gets
    `use_orig_params` too), so that the adapter and AdamW's moments stay fp32. Under FSDP2 Trinity-RFT 0.6.0 casts
    the adapter to bf16 before wrapping it (`TrinityActorRolloutRefWorker._maybe_patch_lora_fsdp2`: FSDP2 hands an
    fp32 adapter bf16 gradients, an error), and AdamW then steps bf16 weights, whose resolution near lora_A's
    starting values (about 1e-4) is above an update at LoRA's learning rates: most of each update to lora_A is
    rounded away. FSDP1 keeps fp32 weights and casts them for the forward and backward only; with
    `use_orig_params` the adapter's parameters keep the names PEFT and rftkit.trainer.lora_saves find it by."""
    if adapter(config) is None:
        return
    if not keys.has(config, STRATEGY_KEY):
        keys.put(config, STRATEGY_KEY, FP32_ADAPTER[STRATEGY_KEY])
    if keys.get(config, STRATEGY_KEY) == FP32_ADAPTER[STRATEGY_KEY] and not keys.has(config, ORIG_PARAMS_KEY):
        keys.put(config, ORIG_PARAMS_KEY, True)


def peft_model(model_path: Path, settings: dict):
    """PEFT's model of the adapter (`settings_of`'s) on the model's shape, on PyTorch's meta device (no weights,
    no memory); an InputError naming the modules where the model has none of them. Built once per model and
    adapter in a process: a launch's summary and its initial adapter both read it."""
    key = (str(Path(model_path).resolve()),
           *(repr(settings.get(name)) for name in ("lora_rank", "lora_alpha", "target_modules", "exclude_modules")))
    if key not in _built:
        _built.clear()  # the last one only
        _built[key] = _build_peft_model(Path(model_path), settings)
    return _built[key]


_built: dict[tuple, object] = {}


def _build_peft_model(model_path: Path, settings: dict):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear)})
    named = module_names(settings["target_modules"]) or []
    missing = [name for name in named if name not in linear]
    if missing:
        raise InputError(f"{LORA_KEY}.0.target_modules (--lora-modules): this model has no linear layer named "
                         f"{', '.join(missing)}; its linear layers: {', '.join(linear)}, or all-linear")
    lora = LoraConfig(r=settings["lora_rank"], lora_alpha=settings["lora_alpha"],
                      target_modules=settings["target_modules"], exclude_modules=settings.get("exclude_modules"),
                      task_type="CAUSAL_LM", bias="none")
    try:
        return get_peft_model(model, lora)
    except ValueError as exc:  # PEFT's NoMatchingPeftModuleError is one
        raise InputError(f"{LORA_KEY}.0.target_modules: {exc} This model's linear layers: {', '.join(linear)}, "
                         f"or all-linear") from None


def check_servable(model_path: Path) -> None:
    """Refuse a model whose architecture vLLM cannot serve with an adapter (its model class lacks SupportsLoRA)."""
    import json

    from vllm.model_executor.models.interfaces import supports_lora
    from vllm.model_executor.models.registry import ModelRegistry

    architectures = json.loads((model_path / "config.json").read_text()).get("architectures") or []
    known = [name for name in architectures if name in ModelRegistry.get_supported_archs()]
    if not any(supports_lora(ModelRegistry.models[name].load_model_cls()) for name in known):
        named = ", ".join(architectures) or "no architecture in its config.json"
        raise InputError(f"{LORA_KEY} (--lora): vLLM cannot serve {model_path} ({named}) with a LoRA adapter; "
                         f"train the whole model")


def describe(config: dict) -> str | None:
    """The summary's line for the adapter: rank, modules and trainable parameters (a share of the model's), or
    None when the whole model is trained. The count needs the model's config.json in a local folder."""
    settings = settings_of(config)
    if settings is None:
        return None
    modules = ", ".join(module_names(settings["target_modules"]) or [settings["target_modules"]])
    head = f"LoRA rank {settings['lora_rank']} on {modules}, alpha {settings['lora_alpha']}"
    model_path = Path(config["model"]["model_path"])
    if not (model_path / "config.json").is_file():
        return (f"{head} (the model is not a local folder: its trainable parameters not counted, its layers and "
                f"vLLM's adapter support not checked)")
    check_servable(model_path)
    trainable, total = peft_model(model_path, settings).get_nb_trainable_parameters()
    base = total - trainable
    return f"{head}: {trainable:,} trainable parameters ({100 * trainable / base:.2f}% of the model's {base:,})"


def trainable_parameters(config: dict) -> int | None:
    """The adapter's parameter count, or None: the whole model is trained, or the model is not a local folder."""
    settings = settings_of(config)
    model_path = Path(config["model"]["model_path"])
    if settings is None or not (model_path / "config.json").is_file():
        return None
    return peft_model(model_path, settings).get_nb_trainable_parameters()[0]


def initial_adapter_path(config: dict) -> Path:
    """Where a launch writes the adapter vLLM starts with: beside the launch config, in the checkpoint root."""
    return Path(config["checkpoint_root_dir"]) / f"{config['project']}-{config['name']}-initial-adapter"


def use_initial_adapter(config: dict) -> None:
    """Point a YAML mapping's adapter at `initial_adapter_path` as Trinity's placeholder (`is_dummy`: the trainer
    starts its own), so that Trinity's validation does not build one from the whole model; unless the adapter
    names a trained one to start from (`path`). And name it (ADAPTER_NAME) where the YAML does not: at each
    weight sync Trinity-RFT 0.6.0 hands vLLM a LoRARequest named by `name`, which vLLM refuses unnamed (the
    first sync then fails with "Call to add_lora method failed: Expected `str`, got `null`")."""
    settings = adapter(config)
    if settings is None:
        return
    if settings.get("name") is None:
        settings["name"] = ADAPTER_NAME
    if settings.get("path") is None or settings.get("is_dummy"):
        settings.update(path=str(initial_adapter_path(config)), is_dummy=True)


def write_initial_adapter(config: dict) -> None:
    """Write the adapter `use_initial_adapter` points at, all zeros, from the model's shape; nothing for a
    trained adapter or without LoRA."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    from rftkit.files import atomic_paths

    settings = settings_of(config)
    if settings is None or not settings.get("is_dummy"):
        return
    model = peft_model(Path(config["model"]["model_path"]), settings)
    folder = Path(settings["path"])
    folder.mkdir(parents=True, exist_ok=True)
    weights = {name: torch.zeros(tensor.shape, dtype=torch.bfloat16)
               for name, tensor in get_peft_model_state_dict(model).items()}
    with atomic_paths(folder / "adapter_model.safetensors") as (path,):
        save_file(weights, str(path))
    model.peft_config["default"].save_pretrained(str(folder))
