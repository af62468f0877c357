"""rftkit.trainer.ref_model: verl's forward-only reference model built without CPU offload unless the config asks
for it, what the dry run says about it, and the patch stopping when what it patches has moved. The trainer
worker itself runs both placements in tests/test_trainer_speed.py (same reference log-probs)."""

import types

import pytest
from verl.workers.config.engine import FSDPEngineConfig

from frozenlake import main as frozenlake_main
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

    return types.SimpleNamespace(FSDPEngine=FSDPEngine)


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

    with pytest.raises(RuntimeError, match="no longer offloads a forward-only model"):
        ref_model.keep_on_gpu(types.SimpleNamespace(FSDPEngine=FSDPEngine))


def test_the_real_verl_still_has_what_the_patch_replaces():
    import verl.workers.engine.fsdp.transformer_impl as impl

    from rftkit.trainer.import_patch import source_has

    assert source_has(impl.FSDPEngine._build_fsdp_module, ref_model.FORCED)


@pytest.mark.parametrize("flags,said", [
    ([], "reference model bfloat16 weights, on the GPU"),
    (["--set", "trainer.trainer_config.ref.fsdp_config.param_offload=true"],
     "reference model bfloat16 weights, on the CPU, copied in for every micro-batch (param_offload)"),
])
def test_the_dry_run_says_where_the_reference_weights_live(frozenlake_data, tmp_path, capsys, flags, said):
    code = frozenlake_main.main(["--dry-run", "--gpus", "8", "--checkpoint-dir", str(tmp_path / "ckpt"),
                                 "--data-dir", str(frozenlake_data), *flags])
    assert code == 0 and said in capsys.readouterr().out
