"""rftkit.needs.disk: what a run's checkpoints take, by part, how many stay, and whether the disk holds them.
(tests/test_trainer_speed.py holds the estimate to checkpoints verl saved.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rftkit.needs import disk
from runkit.tiny_model import write_model_config


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Qwen2.5-0.5B's config.json and a tokenizer-sized file beside it (no weights: the estimate reads the shape)."""
    folder = tmp_path_factory.mktemp("qwen2.5-0.5b")
    write_model_config(folder, "Qwen2.5-0.5B")
    (folder / "tokenizer.json").write_bytes(b"x" * 7_000_000)
    (folder / "model.safetensors").write_bytes(b"weights are not copied into a checkpoint")
    return folder


def config(model, tmp_path, lora=False, **trainer):
    settings = dict(trainer_strategy="fsdp2", save_hf_checkpoint="last", max_checkpoints_to_keep=0, total_steps=None,
                    save_interval=100, trainer_config={})
    return SimpleNamespace(model=SimpleNamespace(model_path=str(model), trust_remote_code=False),
                           trainer=SimpleNamespace(**{**settings, **trainer}), buffer=SimpleNamespace(total_steps=None),
                           checkpoint_job_dir=str(tmp_path / "checkpoints" / "run"), ignore_validator_suggestions=False)


def test_a_whole_checkpoint_is_the_shard_twice_its_size_in_moments_and_the_hf_copy_where_asked(model, tmp_path):
    from rftkit.needs import memory

    params = memory.model_parameters(config(model, tmp_path))
    assert 490e6 < params < 500e6  # Qwen2.5-0.5B, its output layer tied to the embedding
    found = disk.sizes(config(model, tmp_path))
    assert (found.shard, found.optimizer, found.hf_copy, found.files) == (4 * params, 8 * params, 4 * params, 7_000_000
                                                                          + (model / "config.json").stat().st_size)
    assert found.each == found.shard + found.optimizer + found.files  # the HF copy only in the last save
    always = disk.sizes(config(model, tmp_path, save_hf_checkpoint="always"))
    assert always.each == found.each + found.hf_copy
    bf16 = disk.sizes(config(model, tmp_path, trainer_config={"actor": {"fsdp_config": {"model_dtype": "bf16"}}}))
    assert bf16.shard == 2 * params


def test_an_adapters_checkpoint_holds_the_adapter_twice_and_its_moments(model, tmp_path):
    found = disk.sizes(config(model, tmp_path), trainable=4_399_104)
    assert (found.shard, found.adapter, found.optimizer, found.hf_copy) == (4 * 4_399_104, 4 * 4_399_104,
                                                                            8 * 4_399_104, 0)
    assert found.hf_saves == "none"


def test_the_line_counts_the_saves_the_run_keeps_and_warns_when_the_disk_is_short(model, tmp_path, monkeypatch):
    line = disk.describe(config(model, tmp_path))
    assert line.startswith("about 5.9 GB a checkpoint (model shard 2.0 GB, optimizer 4.0 GB), the last one 2.0 GB "
                           "more (its HF copy); every one kept")
    monkeypatch.setattr(disk, "free_bytes", lambda path: 100e9)
    found = disk.sizes(config(model, tmp_path))
    # 250 steps, a save every 100 and at the end: 3 saves, all kept, the last with its HF copy
    line = disk.describe(config(model, tmp_path, total_steps=250))
    assert f"; 3 kept: about {disk.size(3 * found.each + found.hf_copy)}, 100.0 GB free there" in line
    assert "not enough" not in line and 3 * found.each + found.hf_copy > 19e9
    line = disk.describe(config(model, tmp_path, total_steps=250, max_checkpoints_to_keep=2))
    assert f"; 2 kept: about {disk.size(2 * found.each + found.hf_copy)}," in line
    monkeypatch.setattr(disk, "free_bytes", lambda path: 10e9)
    assert disk.describe(config(model, tmp_path, total_steps=250)).endswith(
        "10.0 GB free there (not enough: lower trainer.max_checkpoints_to_keep, or free some)")


def test_free_space_is_the_nearest_existing_folders(tmp_path):
    import shutil

    assert disk.free_bytes(tmp_path / "not" / "yet" / "made") == pytest.approx(shutil.disk_usage(tmp_path).free,
                                                                                rel=0.01)


def test_no_estimate_without_a_local_model(tmp_path):
    assert disk.describe(config(tmp_path / "a-hub-id", tmp_path)) is None
