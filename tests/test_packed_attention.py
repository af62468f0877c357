"""The packed attention (`--attn varlen`) on CPU: the plumbing through transformers, not the CUDA kernels.

On CPU `rftkit.trainer.packed_attention` runs causal sdpa one sequence at a time; on CUDA the same function
calls torch's varlen kernels (tests/test_gpu_trainer_path.py checks those). Here: transformers accepts
the name, packed sequences stay apart whichever way their boundaries arrive, grouped-query heads are
laid out as transformers lays them out, and input it cannot handle is refused.
"""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from rftkit.trainer import packed_attention

packed_attention.register()
LENGTHS = (7, 13, 1, 5)


def model_pair(model_type: str, tmp_path):
    """The same random weights loaded with sdpa (the reference) and with the packed attention."""
    extra = {"head_dim": 16} if model_type == "qwen3" else {}
    config = AutoConfig.for_model(model_type, vocab_size=300, hidden_size=64, intermediate_size=96,
                                  num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, **extra)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    return (AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval(),
            AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation=packed_attention.NAME).eval())


def packed_inputs(sequences):
    lengths = torch.tensor([len(s) for s in sequences])
    cu = torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).to(torch.int32)])
    positions = torch.cat([torch.arange(n) for n in lengths.tolist()])[None]
    return torch.cat(sequences)[None], positions, cu, lengths.max()


# the two examples' model families, with 4 query heads per KV head
@pytest.mark.parametrize("model_type", ["qwen2", "qwen3"])
@pytest.mark.parametrize("boundaries", ["cu_seq_lens (Trinity's trainer)", "position ids only (verl's)"])
def test_packed_sequences_match_each_sequence_run_alone(model_type, boundaries, tmp_path):
    reference, packed = model_pair(model_type, tmp_path)
    sequences = [torch.randint(0, 300, (n,)) for n in LENGTHS]
    ids, positions, cu, longest = packed_inputs(sequences)
    extra = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest} \
        if boundaries.startswith("cu") else {}
    with torch.no_grad():
        alone = torch.cat([reference(input_ids=s[None], use_cache=False).logits[0] for s in sequences])
        together = packed(input_ids=ids, position_ids=positions, use_cache=False, **extra).logits[0]
    assert packed.config._attn_implementation == packed_attention.NAME
    assert torch.allclose(together, alone, atol=1e-5), (together - alone).abs().max()


def test_without_boundaries_the_whole_row_is_one_sequence(tmp_path):
    reference, packed = model_pair("qwen2", tmp_path)
    ids = torch.randint(0, 300, (1, 20))
    with torch.no_grad():
        assert torch.allclose(packed(input_ids=ids, use_cache=False).logits,
                              reference(input_ids=ids, use_cache=False).logits, atol=1e-5)


def test_gradients_flow_through_the_packed_path(tmp_path):
    reference, packed = model_pair("qwen2", tmp_path)
    sequences = [torch.randint(0, 300, (n,)) for n in LENGTHS]
    ids, positions, cu, longest = packed_inputs(sequences)
    packed(input_ids=ids, position_ids=positions, use_cache=False).logits.sum().backward()
    for s in sequences:
        reference(input_ids=s[None], use_cache=False).logits.sum().backward()
    name = "model.layers.0.self_attn.k_proj.weight"
    got, want = dict(packed.named_parameters())[name].grad, dict(reference.named_parameters())[name].grad
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)


def test_a_padded_batch_is_refused_with_the_setting_to_change(tmp_path):
    _, packed = model_pair("qwen2", tmp_path)
    with pytest.raises(ValueError, match="packed micro-batches only .* 2 row.*use_remove_padding: true"):
        packed(input_ids=torch.randint(0, 300, (2, 6)), use_cache=False)


def test_a_padding_mask_is_refused():
    """transformers builds no mask for an implementation it does not know, so the function is called directly."""
    q, kv = torch.zeros(1, 8, 6, 8), torch.zeros(1, 2, 6, 8)
    with pytest.raises(ValueError, match="and a padding mask"):
        packed_attention.varlen_attention(None, q, kv, kv, torch.ones(1, 1, 6, 6, dtype=torch.bool))


def test_boundaries_from_position_ids_split_where_positions_restart():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 0, 1, 2, 3]])
    cu, longest = packed_attention.boundaries({"position_ids": positions}, 10, torch.device("cpu"))
    assert cu.tolist() == [0, 3, 5, 6, 10] and cu.dtype == torch.int32 and longest == 4


@pytest.mark.parametrize("attention", [packed_attention.NAME, "sdpa"])
def test_checkpoints_name_no_attention_so_they_load_anywhere(attention, tmp_path, smollm2_tokenizer):
    """verl copies `override_config` onto the model config, which checkpoints save: the trainer's attention
    must not travel with them (rftkit's needs rftkit, flash_attention_2 needs flash-attn)."""
    import subprocess
    import sys

    from conftest import REPO

    from runkit.tiny_model import load_tokenizer

    model_pair("qwen2", tmp_path)  # writes the weights to tmp_path

    load_tokenizer(smollm2_tokenizer).save_pretrained(tmp_path)
    code = f"""
from rftkit.workers import setup
setup()
from transformers import AutoModelForCausalLM
from verl.workers.config.model import HFModelConfig
config = HFModelConfig(path={str(tmp_path)!r}, override_config={{"attn_implementation": {attention!r}}})
model = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, config=config.hf_config)
assert model.config._attn_implementation == {attention!r}
assert "attn_implementation" not in model.config.to_dict()
model.save_pretrained({str(tmp_path / "checkpoint")!r})
print("saved")
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # a fresh process, without rftkit's registration, loads the checkpoint with transformers' default
    load = "from transformers import AutoModelForCausalLM; " \
           f"print(AutoModelForCausalLM.from_pretrained({str(tmp_path / 'checkpoint')!r}).config._attn_implementation)"
    result = subprocess.run([sys.executable, "-c", load], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("sdpa"), result.stderr[-2000:]


def test_a_verl_that_no_longer_copies_the_overrides_stops_the_worker():
    from dataclasses import dataclass

    @dataclass
    class HFModelConfig:
        def __post_init__(self):
            self.hf_config = None

    from conftest import as_module

    from rftkit.patches.apply import PatchTargetMoved

    with pytest.raises(PatchTargetMoved, match="'attention.out_of_checkpoints'.*verl 0.8.0"):
        packed_attention.keep_out_of_checkpoints(as_module("verl.workers.config.model", HFModelConfig=HFModelConfig))
