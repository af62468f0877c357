"""gpu/frozenlake_learning.py, up to the GPU: the GGUF conversion, the training launch, the comparison."""

import argparse
import json
import subprocess
import sys

import pytest

from gpu import frozenlake_learning as learning

from conftest import REPO


def test_a_gguf_becomes_an_hf_model_that_transformers_loads_and_chats_with(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rftkit.local_llm import default_gguf

    folder = learning.hf_from_gguf(default_gguf(), tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.bfloat16 and not (tmp_path / "model.partial").exists()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert "Hi" in prompt and prompt != "Hi"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] >= len(tokenizer) - 1
    assert learning.hf_from_gguf(default_gguf(), folder) == folder  # a finished folder is reused


def test_the_training_launch_passes_trinitys_checker(tmp_path):
    args = argparse.Namespace(steps=40, batch=8, group=8, lr=2e-6, set=["explorer.runner_per_model=8"])
    (tmp_path / "model").mkdir()
    command = learning.train_command(tmp_path / "model", tmp_path / "data", tmp_path / "ckpt", args)
    result = subprocess.run([*command, "--dry-run", "--gpus", "2"], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "group 8, batch 8 tasks (64 experiences), lr 2e-06" in result.stdout
    assert "runners/engine 8" in result.stdout and "every 40 steps" in result.stdout


def test_the_last_checkpoint_is_the_highest_step(tmp_path):
    for step in (9, 10, 2):
        (tmp_path / "P" / "run" / f"global_step_{step}" / "actor" / "huggingface").mkdir(parents=True)
    assert learning.last_checkpoint(tmp_path).parent.parent.name == "global_step_10"
    with pytest.raises(SystemExit, match="no global_step"):
        learning.last_checkpoint(tmp_path / "empty")


def test_before_and_after_are_compared_from_real_reports(tmp_path, frozenlake_data):
    reports = {}
    for name, model in (("before", "random"), ("after", "oracle")):
        subprocess.run([sys.executable, "scripts/evaluate.py", "--task", "frozenlake", "--model", model,
                        "--data", str(frozenlake_data), "--limit", "20", "--out", str(tmp_path / name)],
                       cwd=REPO, check=True, capture_output=True, timeout=300)
        reports[name] = json.loads((tmp_path / name / "report.json").read_text())
    text = learning.compare(reports["before"], reports["after"], tmp_path)
    assert (tmp_path / "before_after.png").stat().st_size > 1000
    assert (tmp_path / "before_after.md").read_text() == text
    assert f"| after | {reports['after']['success_rate']:.3f}" in text and "| after | 1.000" in text
    assert f"| before | {reports['before']['success_rate']:.3f}" in text
    assert "| map size |" in text


def test_the_wilson_interval_holds_the_rate_at_both_ends():
    """Rounding once put 100/100's upper bound at 1 - 1e-16, and the chart's error bar went negative."""
    from rftkit.evaluation import wilson_interval

    for trials in range(1, 201):
        for successes in (0, trials // 3, trials):
            low, high = wilson_interval(successes, trials)
            assert 0.0 <= low <= successes / trials <= high <= 1.0, (successes, trials)
