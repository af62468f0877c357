"""liger-kernel's fused layers in the trainer, wherever the package is installed.

verl 0.8 has the switch (`use_liger` in the model section, which Trinity-RFT 0.6.0 fills from
`trainer.trainer_config.model`): the trainer's model gets liger-kernel's Triton RMSNorm, SwiGLU and
RoPE when it is loaded, without the fused linear cross-entropy (which verl's own forward replaces).
It is on by default because it measured faster with log-probs as close to the padded reference
(`docs/results/2026-12-04-trainer-levers.md`).

A config may also ask for verl's fused log-prob kernel (`use_fused_kernels`, with Triton as its backend):
the output layer and the log-softmax in one pass, so that the logits are never held whole. The math configs
do (their 152k-word output layer dominates a 0.6B model's step); FrozenLake's 3B measured slower with it.
`describe` says whether it runs.

The launcher's `--liger`:

* `auto`, the default: on where `liger_kernel` is installed (the GPU lock has it; the CPU lock
  does not), off elsewhere; a value the YAML or a `--set` gives is kept unless `--liger` is given;
* `on` / `off`.
"""

from __future__ import annotations

import importlib.util

from rftkit import keys
from rftkit.keys import FUSED_BACKEND_KEY, FUSED_KEY, LIGER_KEY

FUSED_BACKENDS = ("triton", "torch")  # what verl 0.8.0's patch_forward_with_backends accepts
LIGER_CHOICES = ("auto", "on", "off")


def installed() -> bool:
    """Whether liger-kernel can be found here (found, not imported: it imports torch and Triton)."""
    return importlib.util.find_spec("liger_kernel") is not None


def configured_liger(config: dict) -> bool | None:
    """What a YAML mapping sets for the trainer's `use_liger`, or None."""
    return keys.get(config, LIGER_KEY)


def choose(requested: str | None, config: dict, settings: dict | None = None) -> tuple[dict, str]:
    """(config overrides, why) for `--liger requested` (None when not given), the YAML mapping and the
    `--set` settings that will be applied after these overrides."""
    if requested in ("on", "off"):
        return {LIGER_KEY: requested == "on"}, f"--liger {requested}"
    if requested is None and (configured_liger(config) is not None or LIGER_KEY in (settings or {})):
        return {}, "set in the config"
    if installed():
        return {LIGER_KEY: True}, "auto: liger-kernel is installed here"
    return {LIGER_KEY: False}, "auto: liger-kernel is not installed here"


def describe(config: dict) -> str:
    """One line for the launch summary: the trainer's layers and how its log-probs are computed, given a YAML
    mapping."""
    layers = ("liger-kernel's RMSNorm, SwiGLU and RoPE" if configured_liger(config)
              else "transformers' own (no liger-kernel)")
    if keys.get(config, FUSED_KEY):
        return f"{layers}; log-probs by verl's fused output-layer kernel ({keys.get(config, FUSED_BACKEND_KEY)})"
    return layers


def fused_backend_problem(config: dict, config_name: str) -> str | None:
    """Why the fused log-prob kernel cannot run as configured anywhere (no backend verl knows), or None."""
    backend = keys.get(config, FUSED_BACKEND_KEY)
    if keys.get(config, FUSED_KEY) and backend not in FUSED_BACKENDS:
        # verl 0.8.0 then leaves the model's forward as it is, and its fused path fails on the first step
        return (f"{config_name}: {FUSED_KEY} is true but {FUSED_BACKEND_KEY} is {backend!r}; expected one of "
                f"{', '.join(FUSED_BACKENDS)}, or set {FUSED_KEY}=false.")
    return None


def not_loadable(config: dict, config_name: str) -> str | None:
    """Why the trainer cannot load as configured here (liger-kernel asked for, not installed), or None."""
    if configured_liger(config) and not installed():
        return (f"{config_name}: the trainer is set to use liger-kernel ({LIGER_KEY}: true), which is not "
                f"installed here. Install it (`pip install liger-kernel==0.8.5`, as in requirements/lock-gpu.txt) "
                f"or train without it: --liger off.")
    return None
