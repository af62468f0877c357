"""The trainer's attention implementation, with or without the flash-attn package.

Trinity-RFT 0.6's verl trainer loads the model with `attn_implementation="flash_attention_2"`
unless the config says otherwise, and verl 0.8 takes its padding helpers
(`unpad_input`, `pad_input`, ...) from `flash_attn.bert_padding` on every CUDA
machine, whatever the attention setting: Trinity's reference-logprob pass reaches them.
flash-attn has no wheel for every torch and CUDA (none for vLLM 0.23's torch 2.11 +
CUDA 13), so this module offers two ways:

* flash-attn installed: nothing to do; `check_attention` confirms it before launch.
* `--attn sdpa`: PyTorch's scaled-dot-product attention and no padding removal
  (`SDPA_OVERRIDES`), and, in every Ray worker process, verl pointed at the
  pure-torch copies of the padding helpers it ships for NPUs
  (`verl/utils/npu_flash_attn_utils.py`) when flash-attn is absent.
  `worker_setup` does the latter as Ray's `worker_process_setup_hook`.

No module is ever installed under the name `flash_attn`: vLLM imports its
rotary kernels as soon as a package of that name is found, and a stand-in breaks the engine.
"""

from __future__ import annotations

import importlib.util

from rftkit.import_patch import patch_on_import

ATTN_KEY = "trainer.trainer_config.model.override_config.attn_implementation"
TRINITY_DEFAULT_ATTN = "flash_attention_2"  # what Trinity 0.6 passes to verl when the key is unset
ATTN_CHOICES = ("flash_attention_2", "sdpa", "eager")
# Padding removal packs sequences for flash-attn's variable-length kernels: off without them.
SDPA_OVERRIDES = {ATTN_KEY: "sdpa", "trainer.use_remove_padding": False}

MISSING_FLASH_ATTN = """\
{config}: the trainer is set to load the model with attn_implementation={attn}, which needs the
flash-attn package, and `import flash_attn` fails here ({reason}).
Either install a flash-attn build that matches this torch ({torch}) and CUDA, or train without it:
add `--attn sdpa` (sets {key}: sdpa and trainer.use_remove_padding: false)."""


def configured_attention(config: dict) -> str:
    """The attention implementation the trainer will load the model with."""
    node = config
    for key in ATTN_KEY.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node or TRINITY_DEFAULT_ATTN


def flash_attn_error() -> str | None:
    """Why flash-attn's padding helpers cannot be imported, or None if they can."""
    try:
        import flash_attn.bert_padding  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken build raises more than ImportError
        return f"{type(exc).__name__}: {exc}"
    return None


def check_attention(config: dict, config_name: str) -> None:
    """Stop before launch if the configured attention needs flash-attn and it is not importable."""
    attn = configured_attention(config)
    if attn != "flash_attention_2":
        return
    reason = flash_attn_error()
    if reason is not None:
        import torch

        from rftkit.inputs import InputError  # a config this machine cannot run: exit 2, before anything starts

        raise InputError(MISSING_FLASH_ATTN.format(config=config_name, attn=attn, reason=reason,
                                                   torch=torch.__version__, key=ATTN_KEY))


def use_torch_padding(attention_utils) -> None:
    """Make verl's padding entry points use its pure-torch helpers instead of flash_attn's."""
    from verl.utils import npu_flash_attn_utils as torch_padding

    helpers = (torch_padding.index_first_axis, torch_padding.pad_input,
               torch_padding.rearrange, torch_padding.unpad_input)
    attention_utils._get_attention_functions = lambda: helpers


def worker_setup() -> None:
    """Ray's `worker_process_setup_hook`: verl's padding without flash-attn, where it is absent.

    Applied when verl's module is imported, not now: only trainer workers import verl."""
    if importlib.util.find_spec("flash_attn") is None:
        patch_on_import("verl.utils.attention_utils", use_torch_padding)
