"""The trainer's attention, with or without the flash-attn package, chosen at launch.

Trinity-RFT 0.6's verl trainer loads the model with `flash_attention_2` unless the config says
otherwise, and verl 0.8 takes its padding helpers and its log-probabilities from flash-attn when
it imports. flash-attn has no wheel for vLLM 0.23's torch 2.11 + CUDA 13. The launcher's `--attn`:

* `flash_attention_2`: flash-attn's kernels on packed sequences (as shipped upstream);
* `varlen`: the same packing on PyTorch's own variable-length kernels (`packed_attention`), with
  log-probabilities in blocks (`logprobs`);
* `sdpa` / `eager`: padded micro-batches (the slow path, kept for comparison);
* `auto`, the default: the first of these that this machine can run. An attention set in the YAML
  is kept unless `--attn` is given.

`worker_setup` (Ray's worker setup hook) registers `varlen` with transformers; the patches declared in
rftkit.patches keep the attention out of checkpoints' config.json so that they load anywhere, and where
flash-attn is absent point verl at its pure-torch padding helpers (`use_torch_padding`) and at `logprobs`.
No module is installed under the name `flash_attn`: vLLM would take a stand-in for the real package and fail.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rftkit import keys
from rftkit.keys import ATTN_KEY, PADDING_KEY
from rftkit.trainer import VARLEN_ATTENTION
from rftkit.patches.apply import patch_on_import

# packed_attention and logprobs import torch, so this module imports them only in the workers that
# run them: choosing the attention, a dry run and --help stay light.

TRINITY_DEFAULT_ATTN = "flash_attention_2"  # what Trinity 0.6 passes to verl when the key is unset
# --attn choice -> (attn_implementation the trainer loads the model with, padding removal)
SETTINGS = {
    "flash_attention_2": ("flash_attention_2", True),
    "varlen": (VARLEN_ATTENTION, True),
    "sdpa": ("sdpa", False),  # packed, transformers' sdpa needs a dense tokens x tokens mask
    "eager": ("eager", False),
}
ATTN_CHOICES = ("auto", *SETTINGS)

def overrides(choice: str) -> dict:
    """The config keys that select `choice` (a key of SETTINGS)."""
    implementation, padding_removal = SETTINGS[choice]
    return {ATTN_KEY: implementation, PADDING_KEY: padding_removal}


def configured_attention(config: dict) -> str | None:
    """The attention implementation a YAML mapping sets for the trainer, or None."""
    return keys.get(config, ATTN_KEY)


def choose(requested: str | None, config: dict, settings: dict | None = None) -> tuple[dict, str]:
    """(config overrides, why) for `--attn requested` (None when not given), the YAML mapping and the
    `--set` settings that will be applied after these overrides."""
    if requested not in (None, "auto"):
        return overrides(requested), f"--attn {requested}"
    if requested is None and (configured_attention(config) is not None or ATTN_KEY in (settings or {})):
        return {}, "set in the config"
    reason = flash_attn_error()
    if reason is None:
        return overrides("flash_attention_2"), "auto: flash-attn imports here"
    if has_varlen_kernel():
        return overrides("varlen"), f"auto: no flash-attn here ({reason}), so PyTorch's varlen kernels"
    return overrides("sdpa"), f"auto: no flash-attn here ({reason}) and no torch.nn.attention.varlen in this torch"


def has_varlen_kernel() -> bool:
    """Whether this torch has `torch.nn.attention.varlen`, the kernels the varlen path runs on CUDA.
    Looked up as a file in torch's folder: finding the submodule with importlib would import torch
    itself, seconds that a dry run does not need."""
    torch = importlib.util.find_spec("torch")
    attention = [Path(folder) / "nn" / "attention" for folder in (torch.submodule_search_locations or ())] \
        if torch is not None else []
    return any((folder / "varlen.py").is_file() or (folder / "varlen" / "__init__.py").is_file()
               for folder in attention)


def describe(config: dict) -> str:
    """One line for the launch summary: the trainer's attention, given a YAML mapping (or anything
    shaped like one under "trainer"), and how it computes log-probs."""
    implementation = configured_attention(config) or TRINITY_DEFAULT_ATTN
    padding_removal = keys.get(config, PADDING_KEY, True)  # Trinity's default
    if implementation == VARLEN_ATTENTION:
        return (f"{implementation} (torch varlen kernels, packed micro-batches), padding removal "
                f"{padding_removal}, log-probs in blocks (rftkit.trainer.logprobs)")
    kernel = "flash-attn's cross-entropy" if flash_attn_error() is None else "blocks (rftkit.trainer.logprobs)"
    return f"{implementation}, padding removal {padding_removal}, log-probs by {kernel}"


def flash_attn_error() -> str | None:
    """Why flash-attn's padding helpers cannot be imported, or None if they can."""
    try:
        import flash_attn.bert_padding  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken build raises more than ImportError
        return f"{type(exc).__name__}: {exc}"
    return None


MISSING_FLASH_ATTN = ("{config}: the trainer is set to load the model with attn_implementation={attn}, which needs "
                      "the flash-attn package, and `import flash_attn` fails here ({reason}); install a flash-attn "
                      "build for this torch ({torch}) and CUDA, or leave --attn at auto (the packed path without "
                      "flash-attn), or add --attn varlen")


def not_loadable(config: dict, config_name: str) -> str | None:
    """Why the configured attention cannot load here (it needs flash-attn, which does not import), or None."""
    attn = configured_attention(config) or TRINITY_DEFAULT_ATTN
    reason = flash_attn_error() if attn == "flash_attention_2" else None
    if reason is None:
        return None
    import torch

    return MISSING_FLASH_ATTN.format(config=config_name, attn=attn, reason=reason, torch=torch.__version__)


def use_torch_padding(attention_utils) -> None:
    """Make verl's padding entry points use its pure-torch helpers instead of flash_attn's (rftkit.patches)."""
    from rftkit.patches.apply import replace

    def torch_helpers(original):
        def _get_attention_functions():
            from verl.utils import npu_flash_attn_utils as torch_padding

            return (torch_padding.index_first_axis, torch_padding.pad_input,
                    torch_padding.rearrange, torch_padding.unpad_input)
        return _get_attention_functions

    replace("attention.torch_padding", attention_utils, "_get_attention_functions", torch_helpers)


def worker_setup() -> None:
    """Ray's `worker_process_setup_hook`: the `varlen` attention known to transformers, through its registry, once
    transformers is imported (only trainer workers use it). The patches that keep it out of checkpoints and run verl
    without flash-attn are rftkit.patches' ("attention.*", "logprobs.in_blocks")."""
    patch_on_import("transformers.modeling_utils", _register_varlen)


def _register_varlen(modeling_utils) -> None:
    from rftkit.trainer import packed_attention

    packed_attention.register(modeling_utils)
