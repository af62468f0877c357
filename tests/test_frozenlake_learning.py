"""experiments/frozenlake_learning.py, up to the GPU: the GGUF conversion, the training launch, the comparison."""

import argparse
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments import frozenlake_learning as learning
from runkit.runs import last_checkpoint
from runkit.serving import hf_from_gguf, model_folder
from runkit.steps import Step

from conftest import (REPO, config_only_model, copy_sample_data, dry_run, hold_script_calls, write_checkpoint,
                      write_scalars)


def test_a_gguf_becomes_an_hf_model_that_transformers_loads_and_chats_with(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rftkit.reports.local_llm import default_gguf

    folder = hf_from_gguf(default_gguf(), tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.bfloat16 and not (tmp_path / "model.partial").exists()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())  # vLLM loads it plain
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert "Hi" in prompt and prompt != "Hi"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] >= len(tokenizer) - 1
    assert hf_from_gguf(default_gguf(), folder) == folder  # a finished folder is reused
    # what the GPU scripts call: a GGUF goes through the conversion (reused here), a folder is taken as it is
    assert model_folder(default_gguf(), folder) == folder
    assert model_folder(Path(os.path.relpath(folder)), tmp_path / "unused") == folder


def train_dry_run(args, tmp_path, sample_work):
    config_only_model(tmp_path / "model")
    data = copy_sample_data(sample_work, tmp_path / "data", only="frozenlake")
    return dry_run(learning.train_command(tmp_path / "model", data, tmp_path / "ckpt", args))


def test_the_training_launch_passes_trinitys_checker(sample_work, tmp_path):
    args = argparse.Namespace(steps=40, minutes=None, batch=8, group=8, lr=2e-6, set=["explorer.runner_per_model=8"],
                              attn=None, lora=None, selector="random")
    out = train_dry_run(args, tmp_path, sample_work)
    assert "group 8, batch 8 tasks (1024 experiences), lr 2e-06" in out  # the config's train batch
    assert "runners/engine 8" in out and "every 40 steps" in out
    # the script evaluates before and after itself: Trinity's step-0 pass would only cost time
    assert "rollout(s) per task, every 1000000 steps\n" in out


def test_the_difficulty_selector_launches_bots_on_the_maps_reference_pass_rates(sample_work, tmp_path):
    args = argparse.Namespace(steps=40, minutes=None, batch=8, group=8, lr=1e-6, set=[], attn=None, lora=None,
                              selector="difficulty")
    command = learning.train_command(tmp_path / "model", tmp_path / "data", tmp_path / "ckpt", args)
    assert command[command.index("--config") + 1] == "configs/frozenlake_difficulty.yaml"
    out = train_dry_run(args, tmp_path, sample_work)
    assert "difficulty_based" in out and "group 8, batch 8 tasks" in out


def test_each_default_lever_of_the_levers_script_passes_trinitys_checker(sample_work, tmp_path):
    """The levers hold's launches, with the flags its scripts really pass (a `python3` on PATH records them
    instead of training): Trinity must accept each before a hold spends minutes on it. With CARRY, only the
    first run's weights are packed, against CARRY_BASE."""
    out, argvs = hold_script_calls("experiments/holds/frozenlake_levers.sh", ["model.gguf", str(tmp_path / "levers")],
                                   tmp_path, env={"CARRY": "/carry", "CARRY_BASE": "base.gguf"})
    assert out.split() == ["repeat", "rc=0", "bots", "rc=0", "over8", "rc=0"]
    pack = argvs[2]  # after the repeat's launch and its checkpoint lookup
    assert pack[:3] == ["-m", "experiments.carry_weights", "pack"] and pack[-3:] == ["/carry", "--base", "base.gguf"]
    launches = [argv for argv in argvs if argv[:2] == ["-m", "experiments.frozenlake_learning"]]
    assert len(argvs) == 5 and [argvs.index(argv) for argv in launches] == [0, 3, 4]
    expected = ["every 2 step(s)", "difficulty_based", "rest dropped (explorer.over_rollout)"]
    for n, (argv, shown) in enumerate(zip(launches, expected, strict=True)):
        assert argv[2] == "model.gguf"
        args = learning.build_parser().parse_args(argv[3:])
        assert (args.steps, args.save_every) == (16, 100)
        assert shown in train_dry_run(args, tmp_path / str(n), sample_work)


def test_a_lever_of_the_levers_script_may_set_its_launchs_environment(sample_work, tmp_path):
    """The next hold's levers: hold 1 again with a sync every step, and without the micro-batch share patch, whose
    switch is an environment variable (rftkit.patches.MICRO_BATCH_SHARE_ENV) that only that launch gets."""
    from rftkit.patches import MICRO_BATCH_SHARE_ENV

    out, argvs = hold_script_calls("experiments/holds/frozenlake_levers.sh",
                                   ["model.gguf", str(tmp_path / "levers"), "every1=--set synchronizer.sync_interval=1",
                                    f"unshared={MICRO_BATCH_SHARE_ENV}=0"], tmp_path, seen=(MICRO_BATCH_SHARE_ENV,))
    assert out.split() == ["every1", "rc=0", "unshared", "rc=0"]
    launches = [argv for argv in argvs if argv[1:3] == ["-m", "experiments.frozenlake_learning"]]
    assert [argv[0] for argv in launches] == [f"{MICRO_BATCH_SHARE_ENV}=", f"{MICRO_BATCH_SHARE_ENV}=0"]
    every1, unshared = (learning.build_parser().parse_args(argv[4:]) for argv in launches)
    assert "every 1 step(s)" in train_dry_run(every1, tmp_path / "every1", sample_work)  # the script's 2 overridden
    assert "synchronizer.sync_interval=1" not in unshared.set and f"{MICRO_BATCH_SHARE_ENV}=0" not in unshared.set


def test_a_timed_launch_keeps_recent_checkpoints_with_hf_weights(sample_work, tmp_path):
    args = argparse.Namespace(steps=None, minutes=12, save_every=10, batch=8, group=8, lr=1e-6, set=[], attn=None,
                              lora=None, selector="random")
    command = learning.train_command(tmp_path / "model", tmp_path / "data", tmp_path / "ckpt", args)
    assert not any("buffer.total_steps" in part for part in command)  # the time budget decides
    assert {"--set=trainer.save_interval=10", '--set=trainer.save_hf_checkpoint="always"',
            "--set=trainer.max_checkpoints_to_keep=2"} <= set(command)
    assert "every 10 steps" in train_dry_run(args, tmp_path, sample_work)


def test_a_lora_launch_trains_an_adapter_and_keeps_no_hf_copies(sample_work, tmp_path):
    from transformers import AutoConfig

    args = argparse.Namespace(steps=None, minutes=12, save_every=10, batch=8, group=8, lr=1e-5, set=[], attn=None,
                              lora=8, selector="random")
    AutoConfig.for_model("qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=1000,
                         architectures=["Qwen2ForCausalLM"]).save_pretrained(tmp_path / "model")
    data = copy_sample_data(sample_work, tmp_path / "data", only="frozenlake")
    command = learning.train_command(tmp_path / "model", data, tmp_path / "ckpt", args)
    assert not any("save_hf_checkpoint" in part for part in command)  # the adapter is what gets served
    out = dry_run(command)
    assert "trained         LoRA rank 8 on all-linear, alpha 32: " in out and "sync            checkpoint" in out


def test_the_last_checkpoint_is_the_highest_complete_step(tmp_path):
    for step in (9, 10, 2):
        write_checkpoint(tmp_path / "P" / "run" / f"global_step_{step}", hf_weights=True)
    (tmp_path / "P" / "run" / "global_step_11" / "actor" / "huggingface").mkdir(parents=True)  # no shards
    assert last_checkpoint(tmp_path).parent.parent.name == "global_step_10"
    with pytest.raises(SystemExit, match="no complete global_step"):
        last_checkpoint(tmp_path / "empty")


def test_the_last_checkpoint_is_the_last_completed_save_when_trinity_names_one(tmp_path):
    """Interrupted mid-save, global_step_20 exists but is incomplete; the tracker still names 10."""
    for step in (10, 20):
        write_checkpoint(tmp_path / "P" / "run" / f"global_step_{step}", hf_weights=True)
    (tmp_path / "P" / "run" / "latest_checkpointed_iteration.txt").write_text("10")
    assert last_checkpoint(tmp_path).parent.parent.name == "global_step_10"


def test_the_last_checkpoint_skips_one_whose_hf_weights_were_cut_short(tmp_path):
    """Stopped while the save after the loop rewrote the named step's HF weights: the step before it is served."""
    run = tmp_path / "P" / "run"
    for step in (10, 20):
        write_checkpoint(run / f"global_step_{step}", hf_weights=True)
    (run / "latest_checkpointed_iteration.txt").write_text("20")
    weights = run / "global_step_20" / "actor" / "huggingface" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert last_checkpoint(tmp_path).parent.parent.name == "global_step_10"


def test_before_and_after_are_compared_from_real_reports(tmp_path, frozenlake_data):
    reports = {}
    for name, model in (("before", "random"), ("after", "oracle")):
        subprocess.run([sys.executable, "scripts/evaluate.py", "--task", "frozenlake", "--model", model,
                        "--data", str(frozenlake_data), "--limit", "20", "--out", str(tmp_path / name)],
                       cwd=REPO, check=True, capture_output=True, timeout=300)
        reports[name] = json.loads((tmp_path / name / "report.json").read_text())
    text = learning.compare(tmp_path / "before", tmp_path / "after", tmp_path)
    assert (tmp_path / "before_after.png").stat().st_size > 1000
    assert (tmp_path / "before_after.md").read_text() == text
    assert f"| after | {reports['after']['success_rate']:.3f}" in text and "| after | 1.000" in text
    assert f"| before | {reports['before']['success_rate']:.3f}" in text
    assert "| map size |" in text
    # the oracle solves every map: it is better wherever the random walk failed, worse nowhere
    before_goals = {}
    for line in (tmp_path / "before" / "episodes.jsonl").read_text().splitlines():
        episode = json.loads(line)
        uid = episode["task"]["uid"]
        before_goals[uid] = before_goals.get(uid, 0) + episode["metrics"]["success"]
    better = sum(goals == 0 for goals in before_goals.values())
    assert 0 < better < 20
    assert f"more often on {better} maps, less often on 0, as often on {20 - better};" in text
    # the oracle never steps into a hole; the random walk does, as often as a uniform choice would on its moves
    moves = re.search(r"too: (\S+) of (\d+) before, 0.000 of (\d+) after \(a uniform choice of the four moves: "
                      r"(\S+) and", text)
    assert moves and int(moves[2]) > 0 and int(moves[3]) > 0
    assert abs(float(moves[1]) - float(moves[4])) < 0.15
    assert learning.main(["--out", str(tmp_path), "--report-only"]) == 0  # redrawn from the folders alone
    assert (tmp_path / "before_after.md").read_text() == text


def test_report_only_without_the_evaluations_names_what_is_missing(tmp_path, capsys):
    (tmp_path / "before").mkdir()
    with pytest.raises(SystemExit) as stop:
        learning.main(["--out", str(tmp_path), "--report-only"])
    assert stop.value.code == 2
    assert f"no evaluation at {tmp_path / 'before' / 'report.json'}, {tmp_path / 'after' / 'report.json'}" \
        in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["before"]


def test_the_sign_test_matches_its_binomial_tails():
    from rftkit.reports.evaluation import sign_test

    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32)  # all five the same way: 2 x (1/2)^5
    assert sign_test(8, 2) == sign_test(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)


def test_map_by_map_needs_the_same_maps():
    from frozenlake.report import goals, map_by_map

    episode = {"task": {"uid": "a", "desc": ["SF", "HG"]}, "metrics": {"success": 1.0}}
    other = {"task": {"uid": "b", "desc": ["SF", "HG"]}, "metrics": {"success": 0.0}}
    assert map_by_map(goals([episode]), goals([dict(episode, metrics={"success": 0.0})])) == (0, 1, 0)
    with pytest.raises(SystemExit, match="same maps"):
        map_by_map(goals([episode]), goals([other]))
    # the same uid naming another map (a split made again with other settings) is not the same map
    moved = {"task": {"uid": "a", "desc": ["SH", "FG"]}, "metrics": {"success": 0.0}}
    with pytest.raises(SystemExit, match="same maps"):
        map_by_map(goals([episode]), goals([moved]))


def test_the_wilson_interval_holds_the_rate_at_both_ends():
    """Rounding once put 100/100's upper bound at 1 - 1e-16, and the chart's error bar went negative."""
    from rftkit.reports.evaluation import wilson_interval

    for trials in range(1, 201):
        for successes in (0, trials // 3, trials):
            low, high = wilson_interval(successes, trials)
            assert 0.0 <= low <= successes / trials <= high <= 1.0, (successes, trials)


@pytest.mark.parametrize("lora", [False, True], ids=["whole-model", "lora"])
def test_the_whole_script_runs_with_a_fixture_server_and_a_recorded_run(tmp_path, monkeypatch, lora):
    """main() from data to comparison, with the two GPU parts replaced by stand-ins: the fixture
    server for `vllm serve` (the starting model never moves, the trained one always goes Right),
    and for the launch, a run folder as Trinity leaves it after an interrupt. The data step's command is
    checked and answered with 20 test maps by the data code (tests/test_frozenlake_data.py runs the script).
    With --lora the trained model is the starting one served with the last checkpoint's adapter."""
    import contextlib

    from frozenlake.data import write_dataset

    from standins.fake_vllm_server import FakeVLLMServer

    model = config_only_model(tmp_path / "model")
    served = []

    @contextlib.contextmanager
    def fixture_server(weights, tokenizer, log_file, max_model_len, flags, adapter=None):
        served.append((weights, tokenizer, tuple(flags), adapter))
        reply = "I would rather wait." if (weights, adapter) == (model, None) else "Going right: ```Right```"
        with FakeVLLMServer(lambda body: reply) as server:
            yield server.url + "/v1"

    real_run = learning.run_step

    def recorded_run(command, log_file, **kw):
        if command[1:3] == ["scripts/get_frozenlake_data.py", "--local_dir"] and kw["check"]:
            write_dataset(Path(command[3]), map_max_size=6, train_size=40, test_size=20, env_max_steps=8, seed=7,
                          progress=False)
            return Step(0, 0.0)
        if command[1] != "frozenlake/main.py":
            return real_run(command, log_file, **kw)
        assert "--attn" not in command and kw["timeout"] == 0.5 * 60  # the launcher's own choice of attention
        assert any(part.startswith("--set=model.lora_configs=") for part in command) is lora
        run = record_run(tmp_path / "out")
        write_checkpoint(run / "global_step_10", hf_weights=not lora)
        if lora:
            from safetensors.torch import save_file

            (run / "global_step_10" / "actor" / "lora_adapter").mkdir()
            save_file({"w": torch.zeros(2)}, str(run / "global_step_10" / "actor" / "lora_adapter" /
                                                 "adapter_model.safetensors"))
        (run / "global_step_20" / "actor" / "huggingface").mkdir(parents=True)  # being written when it was stopped
        (run / "latest_checkpointed_iteration.txt").write_text("10")
        return Step(130, 30.0, interrupted=True)

    monkeypatch.setattr(learning, "vllm_server", fixture_server)
    monkeypatch.setattr(learning, "run_step", recorded_run)
    monkeypatch.setattr(learning, "require_cuda", lambda what: None)  # the fixtures stand in for the GPU
    out = tmp_path / "out"
    assert learning.main([str(model), "--out", str(out), "--data", str(tmp_path / "data"), "--minutes", "0.5",
                          "--repeats", "1", *(["--lora", "8"] if lora else [])]) == 0
    step = out / "checkpoints" / "AgentScope-FrozenLake" / "frozenlake-grpo" / "global_step_10" / "actor"
    engine = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes",  # frozenlake.yaml's engine
              "--compilation-config", '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY"}')
    trained = (model, model, engine, step / "lora_adapter") if lora else (step / "huggingface", model, engine, None)
    assert served == [(model, model, engine, None), trained]  # the trained weights, the start's tokenizer
    before, after = (json.loads((out / name / "report.json").read_text()) for name in ("before", "after"))
    assert before["episodes"] == after["episodes"] == 20
    assert before["invalid_action_rate"] == 1.0 and after["invalid_action_rate"] == 0.0
    assert (out / "curves.png").stat().st_size > 1000 and (out / "before_after.png").stat().st_size > 1000
    assert "| before | 0.000" in (out / "before_after.md").read_text()


def record_run(out):
    """A run folder as Trinity leaves it (its logs, and three explore steps of every curve's scalar)."""
    run = out / "checkpoints" / "AgentScope-FrozenLake" / "frozenlake-grpo"
    (run / "log").mkdir(parents=True)
    write_scalars(run, "explorer", {tag: [(step, 0.1 * step) for step in range(1, 4)] for tag in learning.CURVES})
    return run


def test_a_training_that_fails_still_leaves_its_curves_and_stops_the_script_with_its_error(tmp_path, monkeypatch,
                                                                                           frozenlake_data):
    real_run = learning.run_step

    def failing_launch(command, log_file, **kw):
        if command[1] != "frozenlake/main.py":
            return real_run(command, log_file, **kw)
        record_run(tmp_path / "out")
        raise SystemExit("error: exit code 1; the end of train.log:\ntorch.OutOfMemoryError: CUDA out of memory.")

    monkeypatch.setattr(learning, "run_step", failing_launch)
    monkeypatch.setattr(learning, "require_cuda", lambda what: None)  # the recorded run stands in for the GPU
    config_only_model(tmp_path / "model")
    with pytest.raises(SystemExit, match="OutOfMemoryError"):
        learning.main([str(tmp_path / "model"), "--out", str(tmp_path / "out"), "--data", str(frozenlake_data),
                       "--minutes", "1", "--skip-before"])  # made already; the other test covers the data step
    assert (tmp_path / "out" / "curves.png").stat().st_size > 1000
    curves = (tmp_path / "out" / "curves.md").read_text()
    assert "rollout/success/mean | trained | 0.3000 (3)" in curves
    assert "experience_pipeline/skipped_group_ratio | trained | 0.3000 (3)" in curves
    assert not (tmp_path / "out" / "after").exists()
