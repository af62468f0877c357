"""Training without flash-attn: the launch check, the sdpa overrides, and verl's padding helpers in Ray workers."""

import subprocess
import sys

import pytest

from rftkit import attention, launch

from conftest import REPO

pytestmark = pytest.mark.skipif(attention.flash_attn_error() is None,
                                reason="flash-attn is installed here; these tests are about its absence")

# verl's padding entry points, called as Trinity's reference-logprob pass calls them, on CPU tensors.
UNPAD_ROUND_TRIP = """
import torch
from verl.utils import attention_utils
hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
flat, indices, cu_seqlens, max_len, *_ = attention_utils.unpad_input(hidden, mask)
assert flat.shape == (5, 3) and cu_seqlens.tolist() == [0, 3, 5] and max_len == 3
back = attention_utils.pad_input(flat, indices, 2, 4)
assert torch.equal(back * mask[..., None], hidden * mask[..., None])
print("round trip ok")
"""


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_verl_needs_flash_attn_for_padding_without_the_setup_hook():
    """The failure seen on GPUs, on CPU: verl's CUDA branch imports flash_attn.bert_padding."""
    result = run_python(UNPAD_ROUND_TRIP)
    assert result.returncode != 0 and "No module named 'flash_attn'" in result.stderr


@pytest.mark.parametrize("when", ["before verl is imported", "after verl is imported"])
def test_the_setup_hook_points_verl_at_its_torch_padding_helpers(when):
    setup = "from rftkit.attention import worker_setup; worker_setup()\n"
    code = setup + UNPAD_ROUND_TRIP if when.startswith("before") else \
        "import verl.utils.attention_utils\n" + setup + UNPAD_ROUND_TRIP
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "round trip ok" in result.stdout


def test_the_hook_reaches_ray_workers_and_the_actors_they_start():
    """Trinity's Trainer actor starts verl's worker actors: the hook must run in those too."""
    code = """
import ray
from rftkit.launch import connect_ray

@ray.remote
class Worker:  # stands for verl's WorkerDict
    def round_trip(self):
        exec(UNPAD_ROUND_TRIP)
        return "ok"

@ray.remote
class Trainer:  # stands for Trinity's Trainer, which creates the workers
    def run(self):
        return ray.get(Worker.remote().round_trip.remote())

class Config:  # the fields of Trinity's config that connect_ray reads
    class cluster:
        ray_address = "local"
    ray_namespace = "attention-test"
    mode = "both"
    def get_envs(self):
        return {}

connect_ray(Config())
print("nested:", ray.get(Trainer.remote().run.remote()))
ray.shutdown()
""".replace("UNPAD_ROUND_TRIP", repr(UNPAD_ROUND_TRIP))
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nested: ok" in result.stdout


def test_launch_stops_before_ray_when_flash_attention_is_configured_but_missing(tmp_path, monkeypatch, frozenlake_data):
    from frozenlake import main as frozenlake_main

    monkeypatch.setattr(launch, "detect_cluster", lambda: (1, 2))
    monkeypatch.setattr(launch, "ensure_ray", lambda: pytest.fail("Ray must not be started"))
    with pytest.raises(SystemExit) as stop:
        frozenlake_main.main(["--data-dir", str(frozenlake_data), "--checkpoint-dir", str(tmp_path)])
    message = str(stop.value)
    assert "attn_implementation=flash_attention_2" in message and "flash-attn" in message
    assert "--attn sdpa" in message and attention.ATTN_KEY in message


def test_attn_flag_and_set_overrides_reach_the_validated_config(tmp_path, capsys):
    from frozenlake import main as frozenlake_main

    code = frozenlake_main.main(["--dry-run", "--gpus", "2", "--checkpoint-dir", str(tmp_path), "--attn", "sdpa",
                                 "--set", "buffer.batch_size=4", "--set", "algorithm.repeat_times=2",
                                 "--set", "explorer.rollout_model.enforce_eager=true"])
    out = capsys.readouterr().out
    assert code == 0
    assert "attention       sdpa (trainer), padding removal False" in out
    assert "up to 4096 tokens per GPU, each row padded to the micro-batch's longest" in out
    assert "group 2, batch 4 tasks (8 experiences)" in out


def test_configured_attention_reads_the_yaml_key():
    assert attention.configured_attention({}) == "flash_attention_2"
    config = {}
    launch.set_key(config, attention.ATTN_KEY, "sdpa")
    assert attention.configured_attention(config) == "sdpa"


@pytest.mark.parametrize("text,expected", [
    ("buffer.batch_size=4", ("buffer.batch_size", 4)),
    ("trainer.use_remove_padding=false", ("trainer.use_remove_padding", False)),
    ("model.model_path=/tmp/a=b", ("model.model_path", "/tmp/a=b")),
    ("buffer.explorer_input.eval_tasksets.0.repeat_times=1", ("buffer.explorer_input.eval_tasksets.0.repeat_times", 1)),
])
def test_set_values_are_parsed_as_yaml(text, expected):
    assert launch.parse_override(text) == expected


@pytest.mark.parametrize("bad", ["batch_size", "=3", "a=[1, 2"])
def test_malformed_set_values_are_refused_with_the_flag_named(bad):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        launch.parse_override(bad)


def test_a_set_key_that_has_no_place_in_the_config_is_refused():
    with pytest.raises(SystemExit, match="cannot set buffer.explorer_input.eval_tasksets.5.name"):
        launch.set_key({"buffer": {"explorer_input": {"eval_tasksets": []}}},
                       "buffer.explorer_input.eval_tasksets.5.name", "x")




def test_sdpa_lets_packed_sequences_attend_to_each_other_so_padding_removal_stays_off():
    """verl's padding removal packs a micro-batch's sequences into one row, told apart only by their
    position ids. flash-attn's variable-length kernels keep them apart; transformers' sdpa does not
    (checked on transformers 5.24), so with sdpa each token would see the sequences packed before it.
    If this starts to fail, packing under sdpa has become correct and worth turning on."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    sequences = [torch.randint(0, 500, (n,)) for n in (7, 13, 5)]
    with torch.no_grad():
        alone = torch.cat([model(input_ids=s[None]).logits[0] for s in sequences])
        positions = torch.cat([torch.arange(len(s)) for s in sequences])[None]
        packed = model(input_ids=torch.cat(sequences)[None], position_ids=positions).logits[0]
        padded = model(input_ids=torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True),
                       attention_mask=torch.nn.utils.rnn.pad_sequence(
                           [torch.ones(len(s), dtype=torch.long) for s in sequences], batch_first=True)).logits
    first = len(sequences[0])
    assert torch.allclose(packed[:first], alone[:first], atol=1e-5)  # the first sequence has nothing before it
    assert (packed[first:] - alone[first:]).abs().max() > 0.1  # the others attend across the boundary
    assert torch.allclose(torch.cat([padded[i, :len(s)] for i, s in enumerate(sequences)]), alone, atol=1e-5)
    assert attention.SDPA_OVERRIDES["trainer.use_remove_padding"] is False
