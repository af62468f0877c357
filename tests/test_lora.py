"""LoRA's switch: the launch flags, the dry run's line with its parameter count, the refused settings, and the
adapter the engine starts with."""

from __future__ import annotations

import re
import sys

import pytest
import torch

import launches
from conftest import REPO
from rftkit import lora
from rftkit.keys import get as keys_get

SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1000, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    """A config-only Qwen2 folder (the launcher reads config.json) and the same model with weights, for PEFT."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("qwen2")
    config = AutoConfig.for_model("qwen2", **SHAPE, architectures=["Qwen2ForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def peft_count(folder, **lora_settings) -> tuple[int, int]:
    """PEFT's own count of trainable and all parameters, on the model with its weights."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    return get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora_settings)).get_nb_trainable_parameters()


def dry_run(tmp_path, frozenlake_data, model, *flags, gpus=2):
    return launches.run([sys.executable, str(REPO / "frozenlake" / "main.py"), "--dry-run", "--gpus", str(gpus),
                         "--model-path", str(model), "--checkpoint-dir", str(tmp_path / "ckpt"),
                         "--data-dir", str(frozenlake_data), *flags], cwd=tmp_path, timeout=180)


def trained_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("trained "))


@pytest.mark.parametrize("flags,peft_settings,named", [
    (["--lora"], dict(r=32, lora_alpha=32, target_modules="all-linear"), "all-linear"),
    (["--lora", "8", "--lora-alpha", "16", "--lora-modules", "q_proj", "v_proj"],
     dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]), "q_proj, v_proj"),
], ids=["defaults", "rank-alpha-modules"])
def test_the_dry_run_names_the_adapter_and_counts_as_peft_does(tmp_path, frozenlake_data, qwen2, flags,
                                                                 peft_settings, named):
    result = dry_run(tmp_path, frozenlake_data, qwen2, *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    trainable, total = peft_count(qwen2, **peft_settings)
    line = trained_line(result.stdout)
    assert line.startswith(f"trained         LoRA rank {peft_settings['r']} on {named}, "
                           f"alpha {peft_settings['lora_alpha']}: {trainable:,} trainable parameters ")
    assert f"({100 * trainable / (total - trainable):.2f}% of the model's {total - trainable:,})" in line
    assert "sync            checkpoint" in result.stdout  # Trinity's sync for LoRA on separate GPUs
    assert "trainer engine  verl FSDP1, activation checkpointing on, the adapter and its optimizer states in fp32" \
        in result.stdout
    assert not (tmp_path / "ckpt").exists(), "a dry run writes nothing, the engine's first adapter included"


def test_without_lora_the_whole_model_is_trained(tmp_path, frozenlake_data, qwen2):
    result = dry_run(tmp_path, frozenlake_data, qwen2)
    assert result.returncode == 0, result.stderr[-2000:]
    assert trained_line(result.stdout) == "trained         the whole model"


def test_a_hub_model_is_said_to_be_unchecked(tmp_path, frozenlake_data):
    result = dry_run(tmp_path, frozenlake_data, "Qwen/Qwen2.5-3B-Instruct", "--lora", "8")
    assert result.returncode == 0, result.stderr[-2000:]
    assert trained_line(result.stdout).endswith("LoRA rank 8 on all-linear, alpha 32 (the model is not a local "
                                                "folder: its trainable parameters not counted, its layers and "
                                                "vLLM's adapter support not checked)")


@pytest.mark.parametrize("flags,message", [
    (["--lora", "0"], "error: --lora: must be at least 1, got 0"),
    (["--lora", "--lora-alpha", "0"], "error: --lora-alpha: must be at least 1, got 0"),
    (["--set", "model.lora_configs=[{lora_rank: 8, lora_alpha: 0}]"],
     "error: model.lora_configs.0.lora_alpha (--lora-alpha): expected a whole number of 1 or more, got 0"),
    (["--lora-alpha", "16"], "error: --lora-alpha, --lora-modules: they set the adapter of --lora, which was not "
                             "given"),
    (["--lora", "--lora-modules", "q_proj", "attn_out"],
     "error: model.lora_configs.0.target_modules (--lora-modules): this model has no linear layer named attn_out; "
     "its linear layers: down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj, or all-linear"),
    (["--set", "model.lora_configs=[{lora_rank: -2}]"],
     "error: model.lora_configs.0.lora_rank (--lora): expected a whole number of 1 or more, got -2"),
    (["--set", "model.lora_configs=[{lora_rank: 4}, {lora_rank: 8}]"],
     "error: model.lora_configs: expected a list of one adapter (Trinity-RFT trains one), got"),
    (["--lora", "4"], "error: model.lora_configs.0.lora_rank (--lora): vLLM serves adapters of rank 1, 8, 16, 32, 64, "
                      "128, 256, 320 or 512; got 4"),
], ids=["rank-0", "alpha-0", "alpha-0-in-yaml", "alpha-without-lora", "unknown-module", "negative-rank-in-yaml",
        "two-adapters", "rank-vllm-cannot-serve"])
def test_bad_lora_settings_are_one_line_and_write_nothing(tmp_path, frozenlake_data, qwen2, flags, message):
    result = dry_run(tmp_path, frozenlake_data, qwen2, *flags)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(message), result.stderr[-2000:]
    assert not (tmp_path / "ckpt").exists()


def test_a_model_vllm_cannot_serve_with_adapters_is_refused(tmp_path, frozenlake_data):
    from transformers import AutoConfig

    gpt2 = tmp_path / "gpt2"
    AutoConfig.for_model("gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=1000, bos_token_id=0, eos_token_id=0,
                         architectures=["GPT2LMHeadModel"]).save_pretrained(gpt2)
    result = dry_run(tmp_path, frozenlake_data, gpt2, "--lora")
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
        2, f"error: model.lora_configs (--lora): vLLM cannot serve {gpt2} (GPT2LMHeadModel) with a LoRA adapter; "
           f"train the whole model")


def test_on_one_gpu_the_adapter_goes_to_the_engine_through_files_and_a_memory_sync_is_refused(tmp_path,
                                                                                             frozenlake_data, qwen2):
    """Colocated, Trinity would sync through memory, which no LoRA engine reads: the launcher asks for its checkpoint
    sync instead (made adapter-only in the trainer, rftkit.trainer.lora_saves), and refuses memory if a user asks."""
    result = dry_run(tmp_path, frozenlake_data, qwen2, "--lora", gpus=1)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(mode colocate)" in result.stdout and "sync            checkpoint" in result.stdout
    result = dry_run(tmp_path, frozenlake_data, qwen2, "--lora", "--set", "synchronizer.sync_method=memory", gpus=1)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: synchronizer.sync_method: memory hands the engine the whole model")
    assert not (tmp_path / "ckpt").exists()
    assert "sync            memory" in dry_run(tmp_path, frozenlake_data, qwen2, gpus=1).stdout  # without LoRA


def test_an_adapter_is_trained_on_fsdp1_unless_the_config_names_an_engine(tmp_path, frozenlake_data, qwen2):
    """Under FSDP2 Trinity-RFT casts the adapter to bf16, so AdamW steps bf16 weights (tests/test_trainer_speed.py
    shows the fp32 adapter FSDP1 trains); a config that names its engine keeps it, and the dry run says the dtype."""
    from rftkit.keys import ORIG_PARAMS_KEY, STRATEGY_KEY

    for given, strategy, orig_params in ((None, "fsdp", True), ("fsdp", "fsdp", True), ("fsdp2", "fsdp2", None)):
        config = {"model": {"lora_configs": [{"lora_rank": 8}]}, "trainer": {}}
        if given:
            config["trainer"]["trainer_strategy"] = given
        lora.fp32_adapter(config)
        assert (keys_get(config, STRATEGY_KEY), keys_get(config, ORIG_PARAMS_KEY)) == (strategy, orig_params)
    config = {"trainer": {}}
    lora.fp32_adapter(config)
    assert config == {"trainer": {}}  # no adapter: Trinity's FSDP2 stays
    result = dry_run(tmp_path, frozenlake_data, qwen2, "--lora", "--set", "trainer.trainer_strategy=fsdp2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "trainer engine  verl FSDP2, activation checkpointing on, the adapter and its optimizer states in bf16 " \
           "(Trinity-RFT's cast under FSDP2)" in result.stdout


def test_an_hf_copy_of_the_model_in_checkpoints_is_off_with_an_adapter_and_refused_when_asked(tmp_path,
                                                                                            frozenlake_data, qwen2):
    """verl would write the PEFT-wrapped weights (`...q_proj.base_layer.weight`, `lora_A.default`) as huggingface/:
    the launch turns that save off, and refuses it when the config asks for one."""
    from rftkit.overrides import load_yaml

    config = {"model": {"lora_configs": [{"lora_rank": 8}]}}
    lora.adapter_saves(config)
    assert config["trainer"]["save_hf_checkpoint"] == "never" and config["synchronizer"]["sync_method"] == "checkpoint"
    config = load_yaml(REPO / "configs" / "frozenlake.yaml")
    lora.adapter_saves(config)
    assert "save_hf_checkpoint" not in config.get("trainer", {})  # no adapter: Trinity's default stays
    result = dry_run(tmp_path, frozenlake_data, qwen2, "--lora", "--set", "trainer.save_hf_checkpoint=always")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: trainer.save_hf_checkpoint: with an adapter verl writes the wrapped model's weights")


def test_the_engines_first_adapter_leaves_the_model_as_it_is(tmp_path, qwen2):
    """The adapter written from the model's shape alone loads with PEFT onto the real model, holds PEFT's names and
    shapes for the settings, and gives the base model's logits: what the engine serves before the first sync."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    settings = {"lora_rank": 4, "lora_alpha": 8, "target_modules": lora.target_modules(["q_proj", "down_proj"])}
    config = {"model": {"model_path": str(qwen2), "lora_configs": [settings]},
              "checkpoint_root_dir": str(tmp_path), "project": "p", "name": "n"}
    lora.use_initial_adapter(config)
    lora.write_initial_adapter(config)
    folder = lora.initial_adapter_path(config)
    assert settings == {**settings, "path": str(folder), "is_dummy": True, "name": lora.ADAPTER_NAME}
    weights = load_file(folder / "adapter_model.safetensors")
    assert len(weights) == 2 * 2 * 2 and all(not w.any() for w in weights.values())  # 2 layers x 2 modules x A, B
    base = AutoModelForCausalLM.from_pretrained(qwen2)
    ids = torch.tensor([[1, 5, 9, 42, 7]])
    expected = base(ids).logits
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(qwen2), folder)
    assert adapted.peft_config["default"].r == 4 and adapted.peft_config["default"].lora_alpha == 8
    assert torch.equal(adapted(ids).logits, expected)


def test_a_launch_builds_the_adapters_meta_model_once(tmp_path, qwen2, monkeypatch):
    """The summary's count and the initial adapter read one PEFT model of the same settings."""
    from transformers import AutoModelForCausalLM

    built = []
    from_config = AutoModelForCausalLM.from_config
    monkeypatch.setattr(AutoModelForCausalLM, "from_config", lambda *a, **k: built.append(1) or from_config(*a, **k))
    monkeypatch.setattr(lora, "_built", {})
    settings = {"lora_rank": 4, "lora_alpha": 8, "target_modules": lora.target_modules(["q_proj"])}
    config = {"model": {"model_path": str(qwen2), "lora_configs": [settings]},
              "checkpoint_root_dir": str(tmp_path), "project": "p", "name": "n"}
    monkeypatch.setattr(lora, "check_servable", lambda model_path: None)  # vLLM's registry: not this test's
    assert "LoRA rank 4 on q_proj" in lora.describe(config)
    lora.use_initial_adapter(config)
    lora.write_initial_adapter(config)
    assert built == [1]
    settings["lora_rank"] = 8  # another adapter: built again
    lora.describe(config)
    assert built == [1, 1]


def test_module_names_survive_trinitys_string_form():
    for names in (["q_proj"], ["q_proj", "v_proj"], ["mlp.down_proj"]):
        target = lora.target_modules(names)
        assert isinstance(target, str) and lora.module_names(target) == names
        assert all(re.fullmatch(target, f"model.layers.0.x.{name}") for name in names)
        assert not re.fullmatch(target, "model.layers.0.x.k_proj")
    assert lora.target_modules(None) == lora.target_modules(["all-linear"]) == "all-linear"
    assert lora.module_names("all-linear") is None


def trained_adapter(base, folder, **settings):
    """An adapter as training leaves one: PEFT's, with both matrices away from their start."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(task_type="CAUSAL_LM", **settings))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.normal_(std=0.05)
    model.save_pretrained(folder)
    return model


def test_a_merged_adapter_gives_the_logits_of_base_plus_adapter(tmp_path, qwen2):
    from transformers import AutoModelForCausalLM

    adapted = trained_adapter(qwen2, tmp_path / "adapter", r=4, lora_alpha=8, target_modules="all-linear")
    ids = torch.tensor([[1, 5, 9, 42, 7, 300]])
    with torch.no_grad():
        expected = adapted(ids).logits
        base = AutoModelForCausalLM.from_pretrained(qwen2)(ids).logits
    result = launches.run([sys.executable, str(REPO / "scripts" / "merge_lora.py"), str(qwen2),
                           str(tmp_path / "adapter"), "--out", str(tmp_path / "merged")], cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    with torch.no_grad():
        logits = merged(ids).logits
    assert not torch.allclose(base, expected, atol=1e-3), "the adapter must change the model for this to test"
    assert torch.allclose(logits, expected, atol=1e-4), (logits - expected).abs().max()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "merged"]


def test_merging_refuses_what_is_not_an_adapter_of_this_base(tmp_path, qwen2):
    from transformers import AutoConfig, AutoModelForCausalLM

    other = tmp_path / "other"
    narrower = AutoConfig.for_model("qwen2", **{**SHAPE, "hidden_size": 32})
    AutoModelForCausalLM.from_config(narrower).save_pretrained(other)
    trained_adapter(other, tmp_path / "other-adapter", r=4, target_modules="all-linear")
    (tmp_path / "empty").mkdir()
    for adapter, message in ((tmp_path / "empty", "no adapter_config.json, adapter_model.safetensors"),
                             (tmp_path / "other-adapter", "does not fit BASE")):
        result = launches.run([sys.executable, str(REPO / "scripts" / "merge_lora.py"), str(qwen2), str(adapter),
                               "--out", str(tmp_path / "merged")], cwd=tmp_path, timeout=180)
        assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], result.stderr[-2000:]
        assert not (tmp_path / "merged").exists() and not (tmp_path / "merged.partial").exists()


def test_a_peft_models_checkpoint_shard_is_its_adapter_and_loads_over_the_base(qwen2):
    """rftkit.trainer.lora_saves.adapter_state_only, on PEFT's model without FSDP (tests/test_trainer_speed.py runs
    it under verl's FSDP2 checkpoints): the saved entries are the adapter's; loading them over a fresh base restores
    the adapter; a shard without one of them is refused; a whole-model shard loads as before."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rftkit.trainer.lora_saves import adapter_state_only

    def peft():
        model = AutoModelForCausalLM.from_pretrained(qwen2)
        return get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"))

    trained = peft()
    with torch.no_grad():
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.fill_(0.5)
    with adapter_state_only(trained):
        shard = trained.state_dict()
    assert shard and all("lora_" in name for name in shard)
    assert len(trained.state_dict()) > len(shard)  # the method is the class's again after the block
    resumed = peft()
    with adapter_state_only(resumed):
        resumed.load_state_dict(shard)
    assert all(torch.equal(a, b) for a, b in zip(trained.state_dict().values(), resumed.state_dict().values()))
    other = peft()
    with adapter_state_only(other), pytest.raises(RuntimeError, match="lacks adapter weight .*lora_"):
        other.load_state_dict(dict(list(shard.items())[1:]))
    whole = peft()
    with adapter_state_only(whole):
        whole.load_state_dict(trained.state_dict())  # strict, as verl loads an older checkpoint
    assert all(torch.equal(a, b) for a, b in zip(trained.state_dict().values(), whole.state_dict().values()))


def test_the_lora_patches_stop_when_trinity_or_verl_moved():

    from rftkit.trainer import lora_saves

    class Moved:
        def save_checkpoint(self):
            pass

        def load_checkpoint(self):
            pass

        def save_state_dict(self):
            pass

    from conftest import as_module
    from rftkit.patches import CHECKPOINT_MANAGER, TRINITY_WORKERS
    from rftkit.patches.apply import PatchTargetMoved

    with pytest.raises(PatchTargetMoved, match="'lora.small_checkpoints'.*verl 0.8.0"):
        lora_saves.small_checkpoints(as_module(CHECKPOINT_MANAGER, FSDPCheckpointManager=Moved))
    with pytest.raises(PatchTargetMoved, match="'lora.adapter_syncs'.*trinity-rft 0.6.0"):
        lora_saves.adapter_only(as_module(TRINITY_WORKERS, TrinityActorRolloutRefWorker=Moved))


def test_an_adapter_gets_the_name_vllm_needs_unless_the_yaml_gives_one(tmp_path):
    """Trinity-RFT 0.6.0 builds each sync's LoRARequest from the adapter's `name`; vLLM refuses None (seen on an
    H200: the first sync failed)."""
    for given, expected in ((None, lora.ADAPTER_NAME), ("mine", "mine")):
        settings = {"lora_rank": 8, **({"name": given} if given else {})}
        config = {"model": {"model_path": str(tmp_path), "lora_configs": [settings]},
                  "checkpoint_root_dir": str(tmp_path), "project": "p", "name": "n"}
        lora.use_initial_adapter(config)
        assert settings["name"] == expected
