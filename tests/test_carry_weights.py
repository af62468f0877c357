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
    assert model.dtype == torch.bfloat16
    for (name, carried), (_, expected) in zip(model.state_dict().items(), bf16_state(checkpoint).items(), strict=True):
        assert torch.equal(carried, expected), name
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


def trained_from(base_fp32, folder, seed=1):
    """`base_fp32` as a run leaves it after a few updates: most weights as they were, some moved, saved in fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_fp32, dtype=torch.float32)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "layers.0." in name:
                weight.add_(torch.randn_like(weight) * 0.05)
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    return folder


def bf16_state(folder):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(torch.bfloat16).state_dict()


def test_with_a_base_only_the_changes_travel_and_the_model_comes_back_the_same(checkpoint, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base"
    base.mkdir()
    carry_weights.bf16_folder(checkpoint, base)  # the model the run started from, as the engine played it
    trained = trained_from(checkpoint, tmp_path / "trained")
    whole = carry_weights.pack(trained, tmp_path / "whole", piece_bytes=2 ** 20)
    changes = carry_weights.pack(trained, tmp_path / "changes", piece_bytes=2 ** 20, base=base)
    assert sum(p.stat().st_size for p in changes) < sum(p.stat().st_size for p in whole) / 2
    carry_weights.unpack(tmp_path / "changes", tmp_path / "model", base=base)
    carried = AutoModelForCausalLM.from_pretrained(tmp_path / "model").state_dict()
    for (name, got), (_, expected) in zip(carried.items(), bf16_state(trained).items(), strict=True):
        assert got.dtype == torch.bfloat16 and torch.equal(got, expected), name
    assert not list((tmp_path / "model").glob("*.xor")) and not (tmp_path / "model" / carry_weights.CHANGES).exists()


def test_unpacking_changes_names_a_missing_or_wrong_base_and_makes_nothing(checkpoint, tmp_path):
    base, other = tmp_path / "base", tmp_path / "other"
    base.mkdir()
    carry_weights.bf16_folder(checkpoint, base)
    other.mkdir()
    carry_weights.bf16_folder(trained_from(checkpoint, tmp_path / "unrelated", seed=2), other)
    carry_weights.pack(trained_from(checkpoint, tmp_path / "trained"), tmp_path / "changes", 2 ** 20, base=base)
    carry_weights.pack(checkpoint, tmp_path / "whole", 2 ** 20)
    with pytest.raises(carry_weights.InputError, match="packed as changes from a base model; give --base"):
        carry_weights.unpack(tmp_path / "changes", tmp_path / "model")
    with pytest.raises(carry_weights.InputError, match=r"tensor model\.layers\.0\.\S+ comes back unlike"):
        carry_weights.unpack(tmp_path / "changes", tmp_path / "model", base=other)
    with pytest.raises(carry_weights.InputError, match="hold the whole weights; unpack them without --base"):
        carry_weights.unpack(tmp_path / "whole", tmp_path / "model", base=base)
    assert not (tmp_path / "model").exists() and not list(tmp_path.glob("tmp*"))


def test_a_base_without_the_trained_tensors_is_refused_before_any_piece(checkpoint, tmp_path, capsys):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    smaller = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    Qwen2ForCausalLM(smaller).to(torch.bfloat16).save_pretrained(tmp_path / "one_layer")
    with pytest.raises(SystemExit) as stopped:
        carry_weights.main(["pack", str(checkpoint), str(tmp_path / "pieces"), "--base", str(tmp_path / "one_layer")])
    assert "has no tensor model.layers.1." in str(stopped.value)
    with pytest.raises(SystemExit):
        carry_weights.main(["pack", str(checkpoint), str(tmp_path / "pieces"), "--base", str(tmp_path / "one_layer"),
                            "--as-saved"])
    assert "--as-saved and --base" in capsys.readouterr().err
    assert not (tmp_path / "pieces").exists()


def test_a_gguf_base_is_converted_on_each_side(tmp_path, capsys):
    """The GPU holds' case: both machines have the GGUF the first run started from."""
    import torch
    from safetensors.torch import load_file, save_file

    from rftkit.reports.local_llm import default_gguf
    from runkit.serving import hf_from_gguf

    started = hf_from_gguf(default_gguf(), tmp_path / "started")
    trained = tmp_path / "trained"
    trained.mkdir()
    for path in started.iterdir():  # a run's save: the weights in fp32, one of them moved
        if path.suffix == ".safetensors":
            tensors = {name: t.float() for name, t in load_file(path).items()}
            name = sorted(tensors)[0]
            tensors[name] = tensors[name] + 0.5
            save_file(tensors, trained / path.name, metadata={"format": "pt"})
        else:
            (trained / path.name).write_bytes(path.read_bytes())
    assert carry_weights.main(["pack", str(trained), str(tmp_path / "pieces"), "--base", str(default_gguf())]) == 0
    moved = tensors[name].numel()  # every value of the moved tensor changes, no other
    total = sum(t.numel() for p in started.glob("*.safetensors") for t in load_file(p).values())
    assert f"{moved:,} of the {total:,} bf16 weights" in capsys.readouterr().out
    assert carry_weights.main(["unpack", str(tmp_path / "pieces"), str(tmp_path / "model"),
                               "--base", str(default_gguf())]) == 0
    expected = {n: t.float().to(torch.bfloat16) for p in trained.glob("*.safetensors") for n, t in load_file(p).items()}
    got = {n: t for p in (tmp_path / "model").glob("*.safetensors") for n, t in load_file(p).items()}
    assert got.keys() == expected.keys() and all(torch.equal(got[n], expected[n]) for n in got)
