"""Training without flash-attn: the launch's choice of attention, its checks, and the worker setup in Ray workers."""

import subprocess
import sys

import pytest

from rftkit import keys
from rftkit import cluster
from rftkit.trainer import attention, packed_attention
from rftkit.keys import REF_DTYPE_KEY
from rftkit.overrides import get_key, load_yaml, parse_override, resolve_config, set_key

from conftest import REPO, trinity_config_stub

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


# What the hook must leave in a trainer process: the packed attention known to transformers, and verl's
# log-probs computed in blocks instead of its row-by-row fallback.
TRAINER_READY = """
import transformers.modeling_utils, verl.utils.torch_functional as verl_functional
assert "rftkit_varlen" in transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS.valid_keys()
from rftkit.patches.apply import applied
assert applied(verl_functional.logprobs_from_logits_v2) == ["logprobs.in_blocks"]
print("trainer ready")
"""


@pytest.mark.parametrize("when", ["before verl is imported", "after verl is imported"])
def test_the_setup_hook_points_verl_at_its_torch_padding_helpers_and_log_probs(when):
    setup = "from rftkit.workers import setup; setup()\n"
    first = "" if when.startswith("before") else "import verl.utils.attention_utils, verl.utils.torch_functional\n"
    result = run_python(first + setup + UNPAD_ROUND_TRIP + TRAINER_READY)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "round trip ok" in result.stdout and "trainer ready" in result.stdout


def test_the_hook_reaches_ray_workers_and_the_actors_they_start():
    """Trinity's Trainer actor starts verl's worker actors: the hook must run in those too."""
    code = """
import ray
from rftkit.cluster import connect_ray

@ray.remote
class Worker:  # stands for verl's WorkerDict
    def round_trip(self):
        exec(UNPAD_ROUND_TRIP)
        exec(TRAINER_READY)
        return "ok"

@ray.remote
class Trainer:  # stands for Trinity's Trainer, which creates the workers
    def run(self):
        return ray.get(Worker.remote().round_trip.remote())

CONFIG_STUB
connect_ray(Config())
print("nested:", ray.get(Trainer.remote().run.remote()))
ray.shutdown()
""".replace("UNPAD_ROUND_TRIP", repr(UNPAD_ROUND_TRIP)).replace("TRAINER_READY", repr(TRAINER_READY)) \
        .replace("CONFIG_STUB", trinity_config_stub("attention-test", "both"))
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "nested: ok" in result.stdout


@pytest.mark.parametrize("how", ["--attn flash_attention_2", "set in the YAML"])
def test_launch_stops_before_ray_when_flash_attention_is_chosen_but_missing(tmp_path, monkeypatch, frozenlake_data,
                                                                             how):
    from frozenlake import main as frozenlake_main

    monkeypatch.setattr(cluster, "detect_cluster", lambda: (1, 2))
    monkeypatch.setattr(cluster, "ensure_ray", lambda: pytest.fail("Ray must not be started"))
    flags = ["--attn", "flash_attention_2"] if how.startswith("--attn") else \
        ["--set", f"{keys.ATTN_KEY}=flash_attention_2"]
    with pytest.raises(SystemExit) as stop:
        frozenlake_main.main(["--data-dir", str(frozenlake_data), "--checkpoint-dir", str(tmp_path), *flags])
    message = str(stop.value)
    assert "attn_implementation=flash_attention_2" in message and "flash-attn" in message
    assert "--attn varlen" in message


def dry_run_summary(data, tmp_path, capsys, *flags) -> str:
    from frozenlake import main as frozenlake_main

    code = frozenlake_main.main(["--dry-run", "--gpus", "2", "--checkpoint-dir", str(tmp_path),
                                 "--data-dir", str(data), *flags])
    assert code == 0
    return capsys.readouterr().out


def test_attn_flag_and_set_overrides_reach_the_validated_config(frozenlake_data, tmp_path, capsys):
    out = dry_run_summary(frozenlake_data, tmp_path, capsys, "--attn", "sdpa", "--set", "buffer.batch_size=4",
                          "--set", "algorithm.repeat_times=2", "--set", "explorer.rollout_model.enforce_eager=true")
    assert "attention       sdpa, padding removal False, log-probs by blocks (rftkit.trainer.logprobs)" in out
    assert "chosen by     --attn sdpa" in out
    assert "up to 25600 tokens per GPU, Ulysses sequence parallel 1, each row padded to the micro-batch's longest" \
        in out
    assert "group 2, batch 4 tasks (1024 experiences)" in out  # the config sets the train batch itself


def test_without_flash_attn_the_default_launch_trains_packed_on_torch_varlen_kernels(frozenlake_data, tmp_path, capsys):
    out = dry_run_summary(frozenlake_data, tmp_path, capsys)
    assert (f"attention       {packed_attention.NAME} (torch varlen kernels, packed micro-batches), padding removal "
            "True, log-probs in blocks (rftkit.trainer.logprobs)") in out
    assert "chosen by     auto: no flash-attn here (ModuleNotFoundError" in out
    # no padding to the longest row; each micro-batch weighted by its tokens (rftkit.trainer.loss_scale)
    assert "up to 25600 tokens per GPU, Ulysses sequence parallel 1; each weighted by its share of the batch's " \
        "tokens\n" in out


def test_an_attention_set_in_the_yaml_is_kept_unless_attn_is_given(frozenlake_data, tmp_path, capsys):
    out = dry_run_summary(frozenlake_data, tmp_path, capsys, "--set", f"{keys.ATTN_KEY}=eager",
                          "--set", "trainer.use_remove_padding=false")
    assert "attention       eager, padding removal False" in out and "chosen by     set in the config" in out
    out = dry_run_summary(frozenlake_data, tmp_path, capsys, "--attn", "auto",
                          "--set", "trainer.use_remove_padding=false")
    assert f"attention       {packed_attention.NAME}" in out and "padding removal False" in out  # --set comes last


def test_auto_prefers_flash_attn_where_it_imports_then_varlen_then_sdpa(monkeypatch):
    monkeypatch.setattr(attention, "flash_attn_error", lambda: None)
    assert attention.choose(None, {}) == (attention.overrides("flash_attention_2"), "auto: flash-attn imports here")
    monkeypatch.setattr(attention, "flash_attn_error", lambda: "ImportError: none")
    overrides, why = attention.choose("auto", {})
    assert overrides == {keys.ATTN_KEY: packed_attention.NAME, keys.PADDING_KEY: True} and "varlen" in why
    monkeypatch.setattr(attention, "has_varlen_kernel", lambda: False)
    overrides, why = attention.choose(None, {})
    assert overrides == {keys.ATTN_KEY: "sdpa", keys.PADDING_KEY: False}
    assert "no torch.nn.attention.varlen" in why


def test_configured_attention_reads_the_yaml_key():
    assert attention.configured_attention({}) is None
    config = {}
    set_key(config, keys.ATTN_KEY, "sdpa")
    assert attention.configured_attention(config) == "sdpa"


@pytest.mark.parametrize("text,expected", [
    ("buffer.batch_size=4", ("buffer.batch_size", 4)),
    ("trainer.use_remove_padding=false", ("trainer.use_remove_padding", False)),
    ("model.model_path=/tmp/a=b", ("model.model_path", "/tmp/a=b")),
    ("buffer.explorer_input.eval_tasksets.0.repeat_times=1", ("buffer.explorer_input.eval_tasksets.0.repeat_times", 1)),
])
def test_set_values_are_parsed_as_yaml(text, expected):
    assert parse_override(text) == expected


@pytest.mark.parametrize("bad", ["batch_size", "=3", "a=[1, 2"])
def test_malformed_set_values_are_refused_with_the_flag_named(bad):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_override(bad)


def test_a_set_key_that_has_no_place_in_the_config_is_refused():
    with pytest.raises(SystemExit, match="eval_tasksets.5.name: the config's buffer.explorer_input.eval_tasksets is a "
                                         "list of 0"):
        set_key({"buffer": {"explorer_input": {"eval_tasksets": []}}},
                       "buffer.explorer_input.eval_tasksets.5.name", "x")
    with pytest.raises(SystemExit, match="--set buffer.batch_size.x: the config.s buffer.batch_size is int, not a"):
        set_key({"buffer": {"batch_size": 4}}, "buffer.batch_size.x", 1)




def test_sdpa_separates_packed_sequences_only_through_a_dense_mask_built_from_positions():
    """verl's padding removal packs a micro-batch's sequences into one row, told apart by their position ids.
    transformers 5.24's sdpa keeps them apart only by building a (tokens x tokens) mask from those ids, and only
    when no cache is in use (verl passes use_cache=False; a model in eval mode otherwise makes one, and then
    every token sees the sequences packed before it). A dense mask over a 16k-token row is what the varlen
    path avoids, so `--attn sdpa` keeps padding removal off."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    sequences = [torch.randint(0, 500, (n,)) for n in (7, 13, 5)]
    first = len(sequences[0])
    with torch.no_grad():
        alone = torch.cat([model(input_ids=s[None]).logits[0] for s in sequences])
        positions = torch.cat([torch.arange(len(s)) for s in sequences])[None]
        with_cache = model(input_ids=torch.cat(sequences)[None], position_ids=positions).logits[0]
        without_cache = model(input_ids=torch.cat(sequences)[None], position_ids=positions, use_cache=False).logits[0]
    assert torch.allclose(with_cache[:first], alone[:first], atol=1e-5)  # the first sequence has nothing before it
    assert (with_cache[first:] - alone[first:]).abs().max() > 0.1  # the others attend across the boundary
    assert torch.allclose(without_cache, alone, atol=1e-5)
    assert attention.overrides("sdpa")[keys.PADDING_KEY] is False


def test_the_reference_model_is_kept_in_bf16_unless_the_config_says_otherwise(tmp_path):
    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    plan = cluster.plan_cluster(1, 1, 1, None)
    default = cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path)}), plan)
    assert get_key(default, REF_DTYPE_KEY, "frozenlake.yaml") == "bfloat16"
    assert "trainer_config" not in raw["trainer"]  # the YAML mapping itself is left alone
    kept = cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path), REF_DTYPE_KEY: "fp32"}), plan)
    assert get_key(kept, REF_DTYPE_KEY, "frozenlake.yaml") == "fp32"


def test_a_config_that_needs_flash_attn_is_refused_here_naming_the_way_out():
    from rftkit.trainer import attention

    if attention.flash_attn_error() is None:
        pytest.skip("flash-attn imports here")
    def config(attn):
        return {"trainer": {"trainer_config": {"model": {"override_config": {"attn_implementation": attn}}}}}

    problem = attention.not_loadable(config("flash_attention_2"), "configs/x.yaml")
    assert problem.startswith("configs/x.yaml: the trainer is set to load the model with "
                              "attn_implementation=flash_attention_2") and "--attn varlen" in problem
    assert "\n" not in problem  # a refusal is one line
    assert attention.not_loadable(config("sdpa"), "configs/x.yaml") is None
    assert attention.not_loadable({}, "configs/x.yaml") == problem, "Trinity's default is flash_attention_2"
