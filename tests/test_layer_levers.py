"""experiments.trainer_speed.layer_levers on CPU: before sharding, each decoder layer compiled in place, or
checkpointed on every other layer only, computing what the model computes without the lever (with checkpointing
and the packed attention). The compile backend here is aot_eager (dynamo's graphs and autograd's, no code
generation); the GPU benchmark uses inductor."""

import types

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from conftest import as_module
from rftkit.patches import CHECKPOINT_EVERY_ENV, COMPILE_LAYERS_ENV, FSDP_ENGINE, PATCHES, WEIGHT_SYNC_DTYPE_ENV
from rftkit.patches.apply import PatchTargetMoved
from experiments.trainer_speed import layer_levers
from rftkit.trainer import packed_attention

packed_attention.register()
LENGTHS = (7, 13, 1, 5)


def fake_verl(build_fsdp_module, builds_then_shards=True, use_liger=False):
    """A stand-in for verl's transformer_impl module: an FSDPEngine whose build order the patch checks, with the
    model config's liger switch."""
    class FSDPEngine:
        model_config = types.SimpleNamespace(use_liger=use_liger)
        if builds_then_shards:
            def _build_model_optimizer(self):
                module = self._build_module()
                module = self._build_fsdp_module(module)
                return module
        else:
            def _build_model_optimizer(self):
                return self._build_fsdp_module(self._build_module())

        _build_fsdp_module = build_fsdp_module

    return as_module(FSDP_ENGINE, FSDPEngine=FSDPEngine)


def tiny_model(tmp_path):
    config = AutoConfig.for_model("qwen2", vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=8, num_key_value_heads=2)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation=packed_attention.NAME)
    model.gradient_checkpointing_enable()  # as Trinity's loader does, before the engine shards the model
    return model.train()


def packed_batch():
    torch.manual_seed(1)
    lengths = torch.tensor(LENGTHS)
    cu = torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).to(torch.int32)])
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    ids = torch.randint(0, 300, (1, int(lengths.sum())))
    longest = int(lengths.max())
    return dict(input_ids=ids, position_ids=positions, use_cache=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                max_length_q=longest, max_length_k=longest)


def loss_and_grads(model):
    model.zero_grad()
    logits = model(**packed_batch()).logits
    loss = logits.float().log_softmax(-1).mean()
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_the_switch_names_the_backend(monkeypatch):
    for value, backend in (("", None), ("0", None), ("1", "inductor"), ("aot_eager", "aot_eager")):
        monkeypatch.setenv(COMPILE_LAYERS_ENV, value)
        assert layer_levers.compile_backend() == backend
    monkeypatch.delenv(COMPILE_LAYERS_ENV)
    assert layer_levers.compile_backend() is None


def test_each_decoder_layer_is_compiled_in_place_before_sharding_and_computes_the_same(tmp_path):
    torch._dynamo.reset()
    eager, compiled = tiny_model(tmp_path / "a"), tiny_model(tmp_path / "b")
    names = [name for name, _ in compiled.named_parameters()]
    seen = []

    def build_fsdp_module(self, module):  # what the patched engine hands to FSDP
        seen.append([layer._compiled_call_impl is not None for layer in layer_levers.decoder_layers(module)])
        return module

    verl = fake_verl(build_fsdp_module)
    layer_levers.before_sharding(verl, "aot_eager", 1)
    built = verl.FSDPEngine()._build_fsdp_module(compiled)
    assert seen == [[True, True]]  # both Qwen2DecoderLayers, compiled by the time FSDP would wrap them
    assert type(built.model.layers[0]).__name__ == "Qwen2DecoderLayer"  # FSDP2's wrap policy matches the class
    assert [name for name, _ in built.named_parameters()] == names  # checkpoints and the weight sync see the same

    frames_before = torch._dynamo.utils.counters["frames"]["ok"]
    want_loss, want_grads = loss_and_grads(eager)
    got_loss, got_grads = loss_and_grads(built)
    assert torch._dynamo.utils.counters["frames"]["ok"] > frames_before, "nothing was compiled"
    assert torch.allclose(got_loss, want_loss, atol=1e-6)
    assert got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_compiling_liger_kernels_layers_under_checkpointing_is_refused_before_anything_is_compiled(tmp_path):
    model = tiny_model(tmp_path)
    verl = fake_verl(lambda self, module: module, use_liger=True)
    layer_levers.before_sharding(verl, "aot_eager", 1)
    with pytest.raises(RuntimeError, match="liger-kernel's layers and gradient checkpointing"):
        verl.FSDPEngine()._build_fsdp_module(model)
    assert not any(layer._compiled_call_impl for layer in layer_levers.decoder_layers(model))
    model.gradient_checkpointing_disable()  # without checkpointing, liger's layers may be compiled
    built = verl.FSDPEngine()._build_fsdp_module(model)
    assert all(layer._compiled_call_impl is not None for layer in layer_levers.decoder_layers(built))


def test_the_patch_is_applied_once():
    verl = fake_verl(lambda self, module: module)
    layer_levers.before_sharding(verl, "inductor", 1)
    patched = verl.FSDPEngine._build_fsdp_module
    layer_levers.before_sharding(verl, "inductor", 1)
    assert verl.FSDPEngine._build_fsdp_module is patched


def test_a_verl_that_builds_differently_stops_the_worker_naming_the_switch():
    moved = f"'layer_levers'.*_build_model_optimizer no longer has.*{COMPILE_LAYERS_ENV}"
    with pytest.raises(PatchTargetMoved, match=moved):
        layer_levers.before_sharding(fake_verl(lambda self, module: module, builds_then_shards=False), None, 2)


def test_a_model_without_named_layers_is_refused():
    verl = fake_verl(lambda self, module: module)
    layer_levers.before_sharding(verl, "inductor", 1)
    with pytest.raises(RuntimeError, match="no decoder layers"):
        verl.FSDPEngine()._build_fsdp_module(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("compile_value,every,asked", [(None, None, False), ("0", "1", False), ("1", None, True),
                                                      (None, "2", True)])
def test_the_levers_are_switched_on_only_when_the_environment_asks(compile_value, every, asked, monkeypatch):
    for name, value in ((COMPILE_LAYERS_ENV, compile_value), (CHECKPOINT_EVERY_ENV, every)):
        monkeypatch.setenv(name, "recorded")  # (delenv alone records nothing for a variable that is not set)
        monkeypatch.delenv(name)
        if value is not None:
            monkeypatch.setenv(name, value)
    assert PATCHES["layer_levers"].switch.on() is asked


def test_a_checkpoint_interval_that_is_not_a_whole_number_is_refused(monkeypatch):
    for value in ("0", "half", "-1"):
        monkeypatch.setenv(CHECKPOINT_EVERY_ENV, value)
        with pytest.raises(ValueError, match=CHECKPOINT_EVERY_ENV):
            layer_levers.checkpoint_every()


def test_every_other_layer_checkpointed_computes_the_same(tmp_path):
    every_layer, sparse = tiny_model(tmp_path / "a"), tiny_model(tmp_path / "b")
    verl = fake_verl(lambda self, module: module)
    layer_levers.before_sharding(verl, None, 2)
    built = verl.FSDPEngine()._build_fsdp_module(sparse)
    assert [layer.gradient_checkpointing for layer in layer_levers.decoder_layers(built)] == [True, False]
    assert all(layer.gradient_checkpointing for layer in layer_levers.decoder_layers(every_layer))
    want_loss, want_grads = loss_and_grads(every_layer)
    got_loss, got_grads = loss_and_grads(built)
    assert torch.allclose(got_loss, want_loss, atol=1e-6) and got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-6), name


def test_the_benchmarks_lever_settings_ask_for_them_through_the_environment(monkeypatch):
    from experiments.trainer_speed import worker
    from rftkit import workers

    monkeypatch.setattr(workers, "setup_colocated", lambda: None)
    for name in (COMPILE_LAYERS_ENV, CHECKPOINT_EVERY_ENV, WEIGHT_SYNC_DTYPE_ENV):  # set below
        monkeypatch.setenv(name, "recorded")  # (delenv alone records nothing for a variable that is not set)
        monkeypatch.delenv(name)
    worker.setup_worker_process("liger-fused")
    assert (layer_levers.compile_backend(), layer_levers.checkpoint_every()) == (None, 1)
    worker.setup_worker_process("fused-compile")
    assert layer_levers.compile_backend() == "inductor"
    worker.setup_worker_process("liger-ckpt-half")
    assert layer_levers.checkpoint_every() == 2
