"""rftkit.trainer.compile_layers on CPU: each decoder layer compiled in place before sharding, with gradient
checkpointing and the packed attention, computing what the uncompiled model computes. The backend here is
aot_eager (dynamo's graphs and autograd's, no code generation); the GPU benchmark uses inductor."""

import types

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from rftkit.trainer import compile_layers, packed_attention
from rftkit.trainer.import_patch import source_has

packed_attention.register()
LENGTHS = (7, 13, 1, 5)


def fake_verl(build_fsdp_module, builds_then_shards=True):
    """A stand-in for verl's transformer_impl module: an FSDPEngine whose build order the patch checks."""
    class FSDPEngine:
        if builds_then_shards:
            def _build_model_optimizer(self):
                module = self._build_module()
                module = self._build_fsdp_module(module)
                return module
        else:
            def _build_model_optimizer(self):
                return self._build_fsdp_module(self._build_module())

        _build_fsdp_module = build_fsdp_module

    return types.SimpleNamespace(FSDPEngine=FSDPEngine)


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
        monkeypatch.setenv(compile_layers.SWITCH_ENV, value)
        assert compile_layers.backend() == backend
    monkeypatch.delenv(compile_layers.SWITCH_ENV)
    assert compile_layers.backend() is None


def test_each_decoder_layer_is_compiled_in_place_before_sharding_and_computes_the_same(tmp_path):
    torch._dynamo.reset()
    eager, compiled = tiny_model(tmp_path / "a"), tiny_model(tmp_path / "b")
    names = [name for name, _ in compiled.named_parameters()]
    seen = []

    def build_fsdp_module(self, module):  # what the patched engine hands to FSDP
        seen.append([layer._compiled_call_impl is not None for layer in compile_layers.decoder_layers(module)])
        return module

    verl = fake_verl(build_fsdp_module)
    compile_layers.compile_before_sharding(verl, "aot_eager")
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


def test_the_patch_is_applied_once():
    verl = fake_verl(lambda self, module: module)
    compile_layers.compile_before_sharding(verl)
    patched = verl.FSDPEngine._build_fsdp_module
    compile_layers.compile_before_sharding(verl)
    assert verl.FSDPEngine._build_fsdp_module is patched


def test_a_verl_that_builds_differently_stops_the_worker_naming_the_switch():
    with pytest.raises(RuntimeError, match=compile_layers.SWITCH_ENV):
        compile_layers.compile_before_sharding(fake_verl(lambda self, module: module, builds_then_shards=False))


def test_verl_0_8_still_loads_then_shards():
    from verl.workers.engine.fsdp import transformer_impl

    assert all(source_has(transformer_impl.FSDPEngine._build_model_optimizer, line)
               for line in compile_layers.BUILDS_THEN_SHARDS)


def test_a_model_without_named_layers_is_refused():
    verl = fake_verl(lambda self, module: module)
    compile_layers.compile_before_sharding(verl)
    with pytest.raises(RuntimeError, match="no decoder layers"):
        verl.FSDPEngine()._build_fsdp_module(torch.nn.Linear(2, 2))


def test_the_worker_hook_patches_verls_engine_only_when_asked(monkeypatch):
    from conftest import patches_asked

    assert patches_asked(compile_layers, None, monkeypatch) == []
    assert patches_asked(compile_layers, "0", monkeypatch) == []
    assert patches_asked(compile_layers, "1", monkeypatch) == [compile_layers.FSDP_IMPL]


def test_the_benchmarks_compile_setting_asks_for_it_through_the_environment(monkeypatch):
    from experiments.trainer_speed import worker
    from rftkit import workers

    from rftkit.trainer import weight_sync

    monkeypatch.setattr(workers, "setup_colocated", lambda: None)
    for name in (compile_layers.SWITCH_ENV, weight_sync.DTYPE_ENV):  # both set by the set-up: put back after
        monkeypatch.setenv(name, "recorded")  # (delenv alone records nothing for a variable that is not set)
        monkeypatch.delenv(name)
    worker.setup_worker_process("liger-fused")
    assert compile_layers.backend() is None
    worker.setup_worker_process("liger-fused-compile")
    assert compile_layers.backend() == "inductor"
