"""liger-kernel in the trainer: on where installed, named in the launch summary, refused where asked for and missing."""

import inspect

import pytest

from rftkit import keys
from rftkit import cluster
from rftkit.overrides import set_key
from rftkit.trainer import liger


def test_auto_turns_liger_on_only_where_it_is_installed(monkeypatch):
    monkeypatch.setattr(liger, "installed", lambda: True)
    assert liger.choose(None, {}) == ({keys.LIGER_KEY: True}, "auto: liger-kernel is installed here")
    monkeypatch.setattr(liger, "installed", lambda: False)
    assert liger.choose("auto", {}) == ({keys.LIGER_KEY: False}, "auto: liger-kernel is not installed here")


def test_the_flag_wins_over_the_yaml_and_the_yaml_over_auto(monkeypatch):
    monkeypatch.setattr(liger, "installed", lambda: True)
    config = {}
    set_key(config, keys.LIGER_KEY, False)
    assert liger.configured_liger(config) is False
    assert liger.choose(None, config) == ({}, "set in the config")
    assert liger.choose(None, {}, {keys.LIGER_KEY: False}) == ({}, "set in the config")  # a --set, applied later
    assert liger.choose("on", config) == ({keys.LIGER_KEY: True}, "--liger on")
    assert liger.choose("off", {}) == ({keys.LIGER_KEY: False}, "--liger off")
    assert liger.choose("auto", config) == ({keys.LIGER_KEY: True}, "auto: liger-kernel is installed here")


def test_this_machine_is_seen_as_it_is():
    import importlib.util

    assert liger.installed() == (importlib.util.find_spec("liger_kernel") is not None)


def dry_run(data, tmp_path, capsys, *flags) -> str:
    from frozenlake import main as frozenlake_main

    assert frozenlake_main.main(["--dry-run", "--gpus", "1", "--checkpoint-dir", str(tmp_path),
                                 "--data-dir", str(data), *flags]) == 0
    return capsys.readouterr().out


def test_the_dry_run_says_which_layers_the_trainer_runs(frozenlake_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(liger, "installed", lambda: False)
    out = dry_run(frozenlake_data, tmp_path, capsys)
    assert "trainer layers  transformers' own (no liger-kernel)\n  chosen by     auto: liger-kernel is not installed" \
        in out
    monkeypatch.setattr(liger, "installed", lambda: True)
    out = dry_run(frozenlake_data, tmp_path, capsys)
    assert "trainer layers  liger-kernel's RMSNorm, SwiGLU and RoPE\n  chosen by     auto: liger-kernel is installed" \
        in out
    out = dry_run(frozenlake_data, tmp_path, capsys, "--liger", "off")
    assert "trainer layers  transformers' own (no liger-kernel)\n  chosen by     --liger off" in out


@pytest.mark.parametrize("flags,said", [
    ([], "trainer engine  verl FSDP2, activation checkpointing on"),
    (["--set", "trainer.trainer_strategy=fsdp", "--set",
      "trainer.trainer_config.model.enable_gradient_checkpointing=false"],
     "trainer engine  verl FSDP1, activation checkpointing off")])
def test_the_dry_run_says_how_verl_shards_and_checkpoints_the_trainer(flags, said, frozenlake_data, tmp_path, capsys):
    assert said in dry_run(frozenlake_data, tmp_path, capsys, *flags).splitlines()


@pytest.mark.parametrize("how", ["--liger on", "set in the YAML"])
def test_a_launch_that_asks_for_missing_liger_stops_before_ray_naming_the_way_out(how, frozenlake_data, tmp_path,
                                                                                 monkeypatch):
    from frozenlake import main as frozenlake_main

    monkeypatch.setattr(liger, "installed", lambda: False)
    monkeypatch.setattr(cluster, "detect_cluster", lambda: (1, 1))
    monkeypatch.setattr(cluster, "ensure_ray", lambda: pytest.fail("Ray must not be started"))
    flags = ["--liger", "on"] if how == "--liger on" else ["--set", f"{keys.LIGER_KEY}=true"]
    with pytest.raises(SystemExit) as stop:
        frozenlake_main.main(["--data-dir", str(frozenlake_data), "--checkpoint-dir", str(tmp_path), *flags])
    assert stop.value.code == 2
    assert "liger-kernel" in str(stop.value) and "--liger off" in str(stop.value)
    assert not list(tmp_path.iterdir()), "nothing is written for a launch refused at its inputs"


def test_trinitys_model_loader_still_applies_liger_from_use_liger():
    from trinity.trainer.verl import monkey_patch

    source = inspect.getsource(monkey_patch)
    assert "use_liger = self.model_config.use_liger" in source
    assert "_apply_liger_kernel_to_instance(" in source


def math_dry_run_args(sample_work, tmp_path, config: str, *flags) -> list[str]:
    """math_bots/main.py's arguments for a one-GPU dry run of `config` on the sample data."""
    data = sample_work / "data" / "math_bots"
    return ["--config", config, "--dry-run", "--gpus", "1", "--checkpoint-dir", str(tmp_path),
            "--train-dir", str(data / "guru_math"), "--eval-dir", str(data / "aime24"), *flags]


def test_the_math_configs_ask_for_verls_fused_logprobs_and_the_dry_run_says_so(sample_work, tmp_path, capsys):
    from math_bots import main as math_main

    for config in ("configs/config_difficulty.yaml", "configs/config_random.yaml"):
        assert math_main.main(math_dry_run_args(sample_work, tmp_path, config)) == 0
        layers = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("trainer layers"))
        assert layers.endswith("; log-probs by verl's fused output-layer kernel (triton)"), layers


def test_frozenlake_keeps_the_logits_path(frozenlake_data, tmp_path, capsys):
    out = dry_run(frozenlake_data, tmp_path, capsys)
    assert "fused" not in next(line for line in out.splitlines() if line.startswith("trainer layers"))


@pytest.mark.parametrize("backend", ["null", "cuda"])
def test_the_fused_kernel_without_a_backend_verl_knows_is_refused_in_a_dry_run(backend, sample_work, tmp_path):
    from math_bots import main as math_main

    with pytest.raises(SystemExit) as stop:
        math_main.main(math_dry_run_args(sample_work, tmp_path, "configs/config_difficulty.yaml",
                                         "--set", f"{keys.FUSED_BACKEND_KEY}={backend}"))
    assert stop.value.code == 2
    assert keys.FUSED_BACKEND_KEY in str(stop.value) and "expected one of triton, torch" in str(stop.value)
    assert not list(tmp_path.iterdir()), "nothing is written for a launch refused at its inputs"
