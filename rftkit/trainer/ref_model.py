"""The reference model's weights kept on the GPU, unless the config offloads parameters.

verl 0.8's FSDP engine gives every forward-only model (the reference policy) FSDP2's
`CPUOffloadPolicy`, or FSDP1's `CPUOffload` where `trainer.trainer_strategy` is "fsdp": its weights
live in host memory and are copied to the GPU for every micro-batch, which is slow for a 3B model.
In bf16 they take an eighth of what the actor keeps on the GPU anyway (fp32 weights, gradients and
Adam's two moments), so `keep_on_gpu` builds a forward-only model without that offload when its
`param_offload` is off. Trinity sets that from `trainer.param_offload`;
`trainer.trainer_config.ref.fsdp_config.param_offload: true` asks for verl's placement for the
reference model alone.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from rftkit.patches.apply import replace


def keep_on_gpu(module: ModuleType) -> None:
    """Patch verl 0.8.0's FSDPEngine: a forward-only model without parameter offload stays on the GPU."""
    def without_forced_offload(build):
        def _build_fsdp_module(self, fsdp_module):
            config = self.engine_config
            if not (config.forward_only and config.strategy in ("fsdp", "fsdp2") and not config.param_offload):
                return build(self, fsdp_module)
            # The forward-only flag decides only the offload here; the engine keeps it everywhere else
            # (no optimizer, no moving of the weights between steps).
            self.engine_config = dataclasses.replace(config, forward_only=False)
            try:
                return build(self, fsdp_module)
            finally:
                self.engine_config = config
        return _build_fsdp_module

    replace("ref_model.on_gpu", module, "FSDPEngine._build_fsdp_module", without_forced_offload)
