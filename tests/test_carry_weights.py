"""experiments/carry_weights.py on CPU: a small Qwen2 saved in fp32, as verl saves a checkpoint's weights, goes
into pieces and comes back as the same model in bf16; a missing or changed piece is named, and nothing is made."""

import json

import pytest

from experiments import carry_weights


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A fixture model: a 2-layer Qwen2 of random weights in fp32, in shards with their index."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    folder = tmp_path_factory.mktemp("checkpoint") / "huggingface"
    Qwen2ForCausalLM(config).to(torch.float32).save_pretrained(folder, max_shard_size="40KB")
    (folder / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    return folder


def test_the_model_comes_back_whole_in_bf16(checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    assert len(list(checkpoint.glob("*.safetensors"))) > 1  # the index is exercised
    made = carry_weights.pack(checkpoint, tmp_path / "pieces", piece_bytes=16 * 1024)
    pieces = [p for p in made if p.name.startswith(carry_weights.PIECE)]
    assert len(pieces) > 3 and all(p.stat().st_size <= 16 * 1024 for p in pieces)
    carry_weights.unpack(tmp_path / "pieces", tmp_path / "model")

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    original = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    assert model.dtype == torch.bfloat16
    for (name, carried), (_, fp32) in zip(model.state_dict().items(), original.state_dict().items(), strict=True):
        assert torch.equal(carried, fp32.to(torch.bfloat16)), name
    index = json.loads((tmp_path / "model" / "model.safetensors.index.json").read_text())
    stored = sum(t.numel() * 2 for p in (tmp_path / "model").glob("*.safetensors") for t in load_file(p).values())
    assert index["metadata"]["total_size"] == stored
    assert (tmp_path / "model" / "tokenizer_config.json").is_file()


def test_as_saved_carries_the_fp32_weights_bit_for_bit(checkpoint, tmp_path):
    carry_weights.main(["pack", str(checkpoint), str(tmp_path / "pieces"), "--as-saved"])
    carry_weights.main(["unpack", str(tmp_path / "pieces"), str(tmp_path / "model")])
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == sorted(p.name for p in checkpoint.iterdir())
    for path in checkpoint.iterdir():
        assert (tmp_path / "model" / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_missing_or_changed_piece_is_named_and_no_model_is_made(checkpoint, tmp_path):
    carry_weights.pack(checkpoint, tmp_path / "pieces", piece_bytes=16 * 1024)
    second = tmp_path / "pieces" / f"{carry_weights.PIECE}001"
    second.write_bytes(second.read_bytes()[:-1] + b"x")
    with pytest.raises(carry_weights.InputError, match=r"SHA256SUMS, line 2: piece model.tar.001 differs"):
        carry_weights.unpack(tmp_path / "pieces", tmp_path / "model")
    second.unlink()
    with pytest.raises(carry_weights.InputError, match=r"line 2: piece model.tar.001 is missing"):
        carry_weights.unpack(tmp_path / "pieces", tmp_path / "model")
    assert not list(tmp_path.glob("model*"))


def test_the_command_refuses_a_folder_that_is_not_a_model_before_writing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as stopped:
        carry_weights.main(["pack", str(tmp_path / "empty"), str(tmp_path / "pieces")])
    assert stopped.value.code == 2 and "expected a Hugging Face model folder" in str(stopped.value)
    assert not (tmp_path / "pieces").exists()


def test_too_many_pieces_are_refused_and_leave_nothing_behind(checkpoint, tmp_path):
    with pytest.raises(carry_weights.InputError, match="more than 1000 pieces"):
        carry_weights.pack(checkpoint, tmp_path / "out" / "pieces", piece_bytes=1)
    assert list((tmp_path / "out").iterdir()) == []
