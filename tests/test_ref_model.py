"""rftkit.trainer.ref_model: verl's forward-only reference model built without CPU offload unless the config asks
for it, what the dry run says about it, and the patch stopping when what it patches has moved. The trainer
worker itself runs both placements in tests/test_trainer_speed.py (same reference log-probs)."""

import pytest
from conftest import as_module
from verl.workers.config.engine import FSDPEngineConfig

from rftkit.patches import FSDP_ENGINE
from rftkit.patches.apply import PatchTargetMoved
from rftkit.trainer import ref_model


def fake_verl(seen):
    """A stand-in for verl's transformer_impl whose builder records the config it is given; its source
    holds the line the patch looks for, as verl 0.8.0's does."""
    class FSDPEngine:
        def _build_fsdp_module(self, module):
            if self.engine_config.offload_policy or self.engine_config.forward_only:  # as in verl 0.8.0
                seen.append("offloaded")
            else:
                seen.append("on the GPU")
            return module

    return as_module(FSDP_ENGINE, FSDPEngine=FSDPEngine)


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
@pytest.mark.parametrize("settings,placement", [
    (dict(forward_only=True), "on the GPU"),  # the reference model
    (dict(forward_only=True, param_offload=True), "offloaded"),  # asked for by the config
    (dict(forward_only=False), "on the GPU"),  # the actor: untouched
    (dict(forward_only=False, offload_policy=True), "offloaded"),
])
def test_only_a_reference_model_without_param_offload_stays_on_the_gpu(settings, placement, strategy):
    seen = []
    module = fake_verl(seen)
    ref_model.keep_on_gpu(module)
    ref_model.keep_on_gpu(module)  # applied twice (two hooks in one process): wrapped once
    engine = module.FSDPEngine()
    engine.engine_config = FSDPEngineConfig(strategy=strategy, **settings)
    assert engine._build_fsdp_module("model") == "model" and seen == [placement]
    assert engine.engine_config.forward_only is settings["forward_only"], "the engine keeps its own config"


def test_the_patch_stops_when_verl_has_moved():
    class FSDPEngine:
        def _build_fsdp_module(self, module):
            return module

    with pytest.raises(PatchTargetMoved, match="'ref_model.on_gpu'.*_build_fsdp_module no longer has"):
        ref_model.keep_on_gpu(as_module(FSDP_ENGINE, FSDPEngine=FSDPEngine))

