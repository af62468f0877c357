"""tests/gpu/smoke.py: its shrunk configs pass Trinity's checker here, its checks catch what they claim to,
and, on a machine with a CUDA GPU, the smoke itself."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from rftkit.overrides import apply_overrides, load_yaml
from rftkit.trainer import lora_requests
from runkit.examples import EXAMPLES
from runkit.sample_data import make_data, sample_data
from tests.gpu import smoke

from conftest import REPO, config_only_model, copy_sample_data, dry_run, write_scalars
from test_engine_check import probe, runner_logs


needs_gpus = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (docs/gpu.md: GPU smoke test)")


def smoke_on_gpus(out, *flags):
    """The smoke as a user runs it (tokenizer from $GPU_SMOKE_TOKENIZER where the GGUF package is absent)."""
    result = subprocess.run([sys.executable, "-m", "tests.gpu.smoke", "--out", str(out), *flags], cwd=REPO,
                            timeout=3600)
    summary = json.loads((out / "summary.json").read_text())
    return result.returncode, summary


# One test per config and per fault, so a machine can run the part it has time for, e.g.
#   pytest "tests/test_gpu_smoke.py::test_gpu_smoke_trains_two_steps[config_random.yaml]"
@needs_gpus
@pytest.mark.parametrize("config", list(smoke.CONFIGS))
def test_gpu_smoke_trains_two_steps(config, tmp_path):
    code, summary = smoke_on_gpus(tmp_path, "--configs", config)
    assert code == 0, [check for check in summary[0]["checks"] if not check["ok"]]
    assert len(summary) == 1 and summary[0]["ok"] and summary[0]["experiences"][:1] >= [smoke.TASKS * smoke.GROUP]


@needs_gpus
@pytest.mark.parametrize("config", ["frozenlake.yaml", "config_difficulty.yaml"])
def test_gpu_smoke_trains_two_steps_with_lora(config, tmp_path):
    code, summary = smoke_on_gpus(tmp_path, "--configs", config, "--lora", "8")
    assert code == 0, [check for check in summary[0]["checks"] if not check["ok"]]
    assert "every engine loaded each trained adapter the explorer pulled" in [c["name"] for c in summary[0]["checks"]]


@needs_gpus
@pytest.mark.parametrize("fault", list(smoke.FAULTS))
def test_gpu_smoke_a_failed_run_ends_and_says_so(fault, tmp_path):
    code, summary = smoke_on_gpus(tmp_path, "--fault", fault)
    assert code == 0, [check for check in summary[0]["checks"] if not check["ok"]]
    assert summary[0]["exit_code"] not in (0, None) and summary[0]["fault_to_exit_s"] <= smoke.FAULT_DEADLINE


@pytest.mark.parametrize("config", list(smoke.CONFIGS))
def test_the_smoke_settings_pass_trinitys_checker(config, sample_work, tmp_path):
    """The exact launch the smoke makes, as a dry run: every --set key exists and validates."""
    config_only_model(tmp_path / "model")
    copy_sample_data(sample_work, tmp_path / "work")
    command = smoke.command_for(config, tmp_path / "work", tmp_path / "model", tmp_path / "ckpt")
    out = dry_run(command)
    assert f"group {smoke.GROUP}, batch {smoke.TASKS} tasks" in out
    assert "attention       rftkit_varlen (torch varlen kernels, packed micro-batches), padding removal True" in out


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_smoke_lora_launch_passes_trinitys_checker_and_syncs_through_files(gpus, sample_work, tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         vocab_size=1000, architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path / "model")
    copy_sample_data(sample_work, tmp_path / "work")
    command = smoke.command_for("frozenlake.yaml", tmp_path / "work", tmp_path / "model", tmp_path / "ckpt",
                                lora_rank=8)
    out = dry_run(command, gpus=gpus)
    assert "trained         LoRA rank 8 on all-linear, alpha 32: " in out and "sync            checkpoint" in out


def write_lora_run(job, tensors=2, pulled=(0, 1, 2), loaded=((1, 2), (1, 2)), served=((0,), (0, 1))):
    """What the adapter checks read of a LoRA run: the last step's adapter, the explorer's log with the versions its
    syncs pulled, and each engine's log, with the versions it loaded and those its OpenAI API served
    (rftkit.trainer.lora_requests's lines)."""
    from safetensors.torch import save_file

    adapter = job / f"global_step_{smoke.STEPS}" / "actor" / "lora_adapter"
    adapter.mkdir(parents=True)
    save_file({f"base_model.model.layers.{i}.q_proj.lora_A.weight": torch.zeros(2, 4) for i in range(tensors)},
              str(adapter / "adapter_model.safetensors"))
    (job / "log").mkdir()
    (job / "log" / "explorer.log").write_text("".join(
        f"INFO [explorer.py:491] Explorer sync_weights at step {2 * i} finished, model version = {v}.\n"
        for i, v in enumerate(pulled)))
    for engine, versions in enumerate(loaded):
        (job / "log" / f"explorer_rollout_model_{engine}_0.log").write_text("".join(
            f"INFO Redirect `lora_path` from old_model_version={v - 1} to model_version={v} successfully.\n"
            for v in versions) + "".join(
            f"INFO {lora_requests.SERVED}{job}/global_step_{v}/actor/lora_adapter\n" for v in served[engine]))


@pytest.mark.parametrize("run,ok", [({}, True), ({"tensors": 0}, False), ({"loaded": ((1, 2), ())}, False),
                                    ({"loaded": ((1, 2), (1,))}, False), ({"loaded": ((1, 2),)}, False),
                                    ({"served": ((1, 2), ())}, False), ({"pulled": (0, 0), "loaded": ((), ())}, True)],
                         ids=["complete", "empty-adapter", "an-engine-never-loaded-it", "an-engine-missed-a-version",
                              "an-engine-missing", "an-api-served-the-base-model", "no-trained-version-pulled"])
def test_the_adapter_checks_need_tensors_and_every_engine_loading_each_pulled_version(tmp_path, run, ok):
    write_lora_run(tmp_path, **run)
    checks = smoke.adapter_checks(tmp_path, engines=2)
    assert all(check.ok for check in checks) is ok, checks


def write_run(job, weights, experiences=(16, 16), tags=("rollout/success/mean",), steps=2, alphas=None,
              idle_engine=False, stale_engine=False):
    """A run folder laid out as Trinity writes it (tensorboard, checkpoints, state file, runner logs) on the
    plan the launcher makes for 4 GPUs, with the probes of its two engines at versions 0 and 1."""
    import shutil

    import yaml

    runner_logs(job / "log", {0: [1, 2], 1: [1] if idle_engine else [1, 2]})
    plan = {"cluster": {"node_num": 1, "gpu_per_node": 4}, "explorer": {"rollout_model": {"engine_num": 2}}}
    (job.parent.parent / "AgentScope-FrozenLake-frozenlake-grpo.yaml").write_text(yaml.safe_dump(plan))
    shutil.copytree(weights[1], job / "global_step_1" / "actor" / "huggingface")
    probes = [probe(0, 0, weights[0]), probe(1, 0, weights[0]), probe(0, 1, weights[1]),
              probe(1, 1, weights[0 if stale_engine else 1])]
    (job.parent.parent / "probes.jsonl").write_text("".join(json.dumps(p) + "\n" for p in probes))
    steps_logged = range(1, len(experiences) + 1)
    write_scalars(job, "explorer", {smoke.EXPERIENCE_COUNT: list(zip(steps_logged, experiences)),
                                    **{tag: [(step, 0.0) for step in steps_logged] for tag in tags}})
    write_scalars(job, "trainer", {"time/train_step": [(step, 1.5) for step in range(1, steps + 1)],
                                   smoke.TRAINER_PEAK: [(step, 10.0 + step) for step in range(1, steps + 1)]})
    if steps != 1:  # global_step_1 holds real weights, above
        final = job / f"global_step_{steps}" / "actor" / "huggingface" / "model.safetensors"
        final.parent.mkdir(parents=True)
        final.write_bytes(b"x")
    if alphas is not None:
        state = {"selector_type": "difficulty_based_resumable", "alphas": alphas, "betas": alphas}
        (job / "explorer_meta.json").write_text(json.dumps({"latest_iteration": steps, "taskset_states": [state]}))


def checked(tmp_path, weights, config="frozenlake.yaml", tasks=None, exit_code=0, **run):
    checkpoints = tmp_path / "ckpt"
    write_run(checkpoints / "AgentScope-FrozenLake" / "frozenlake-grpo", weights, **run)
    result = smoke.RunResult(config, exit_code, 100.0)
    smoke.check_run(result, checkpoints, launched_at=0.0, tasks=tasks, probes=checkpoints / "probes.jsonl",
                    model=weights[0])
    return result


def test_a_complete_run_passes_every_check(tmp_path, versions):
    result = checked(tmp_path, versions, config="frozenlake_difficulty.yaml", tasks=3, alphas=[1.0, 2.0, 3.0])
    assert result.ok, [c for c in result.checks if not c.ok]
    assert result.experiences == [16, 16] and result.per_step_s is not None and result.per_step_s < 60
    assert result.trainer_peak_gib == 12.0 and "| 12.0 GiB |" in smoke.summary_table([result])
    assert result.plan == "4 GPU(s): 2 engine(s) x 1 GPU, trainer 2 GPU(s)"
    assert "engine 1 holds the trainer's version-1 weights" in [c.name for c in result.checks]


@pytest.mark.parametrize("broken,failing", [
    (dict(exit_code=1), "exit code 0"),
    (dict(steps=1), "step-2 checkpoint with HF weights"),
    (dict(tags=("rollout/accuracy/mean",)), "scalar rollout/success/mean"),
    (dict(experiences=(3, 16)), f"{smoke.EXPERIENCE_COUNT} >= 16 rollouts at step 1"),
    (dict(experiences=()), f"{smoke.EXPERIENCE_COUNT} >= 16 rollouts at step 1"),
    (dict(idle_engine=True), "every engine started rollouts in every explore step"),
    (dict(stale_engine=True), "engine 1 holds the trainer's version-1 weights"),
])
def test_each_check_catches_what_it_claims(tmp_path, versions, broken, failing):
    result = checked(tmp_path, versions, **broken)
    assert not result.ok
    assert failing in [c.name for c in result.checks if not c.ok]


def test_the_selector_check_needs_a_posterior_for_every_task(tmp_path, versions):
    result = checked(tmp_path, versions, config="frozenlake_difficulty.yaml", tasks=4, alphas=[1.0, 2.0, 3.0])
    assert [c.name for c in result.checks if not c.ok] == ["selector posteriors saved"]
    assert not checked(tmp_path / "none", versions, config="frozenlake_difficulty.yaml", tasks=3).ok


def test_tags_are_matched_exactly_or_by_a_prefix_ending_in_a_slash():
    from math_bots.example import MATH

    tags = ["rollout/accuracy/mean", "eval/aime24/accuracy/mean@1", "eval/aime24/format/mean@1"]
    assert all(smoke.has_tag(tags, wanted) for wanted in MATH.tags)
    assert not smoke.has_tag(tags, "eval/aime24/accuracy") and smoke.has_tag(tags, "eval/aime24/accuracy/")
    assert not smoke.has_tag(tags[:1], "eval/aime24/accuracy/")


def test_make_data_writes_every_example_where_its_launch_reads_it(tmp_path):
    import pyarrow.parquet as pq

    make_data(tmp_path, tasks=24)
    assert pq.read_metadata(tmp_path / "data" / "frozenlake" / "train.parquet").num_rows == 24
    assert pq.read_metadata(tmp_path / "data" / "frozenlake" / "test.parquet").num_rows == 8
    math_train = pq.read_table(tmp_path / "data" / "math_bots" / "guru_math" / "train.parquet")
    assert math_train.num_rows == 24 and math_train.column("answer")[1].as_py() == "#### 4"
    assert "boxed" not in math_train.column("question")[1].as_py()  # the conversion took the instruction out
    assert pq.read_metadata(tmp_path / "data" / "math_bots" / "aime24" / "test.parquet").num_rows == 8
    for example in EXAMPLES.values():  # every config of every example, pointed there, takes its data
        for selector in example.configs:
            folders = {role: str(folder) for role, folder in sample_data(example, tmp_path).items()}
            example.check_data(apply_overrides(load_yaml(example.config_path(selector)), {}, folders))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_smoke_refuses_with_a_message(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tests.gpu.smoke", "--out", str(tmp_path)], cwd=REPO,
                            capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2 and "needs a CUDA GPU" in result.stderr


@pytest.mark.parametrize("fault", list(smoke.FAULTS))
def test_the_fault_runs_pass_trinitys_checker_with_the_fault_plugin(fault, sample_work, tmp_path):
    config_only_model(tmp_path / "model")
    copy_sample_data(sample_work, tmp_path / "work")
    command = smoke.command_for("frozenlake.yaml", tmp_path / "work", tmp_path / "model", tmp_path / "ckpt", fault)
    env = smoke.fault_plugin_env(os.environ)
    out = dry_run(command, env=env)
    if fault == "explorer":
        assert "operators       ['fault_explorer']" in out


def test_the_injected_faults_raise_what_the_smoke_looks_for():
    import asyncio
    import importlib

    faults = importlib.import_module(smoke.FAULT_PLUGIN)
    assert faults.INJECTED_FAULT == smoke.INJECTED_FAULT
    with pytest.raises(RuntimeError, match="explorer: injected fault"):
        asyncio.run(faults.FaultExplorer().process([]))
    trainer = faults.FaultTrainer.__new__(faults.FaultTrainer)  # its buffer reader needs a running buffer
    with pytest.raises(RuntimeError, match="trainer at step 1: injected fault"):
        asyncio.run(trainer.sample(1))


def fault_run(tmp_path, exit_code=1, delay=30.0, output=None):
    from test_run_supervision import log_line, write_logs

    checkpoints = tmp_path / "ckpt"
    job = checkpoints / "AgentScope-FrozenLake" / "frozenlake-grpo"
    write_logs(job / "log", explorer=[log_line("ERROR", "10:00:00", f"Error in Explorer: RuntimeError: "
                                                                    f"explorer: {smoke.INJECTED_FAULT}")])
    log = tmp_path / "launch.log"
    log.write_text(output if output is not None else
                   f"error: training failed: Error in Explorer: RuntimeError: explorer: {smoke.INJECTED_FAULT}\n")
    fault_at = time.mktime((time.localtime().tm_year, 11, 30, 10, 0, 0, 0, 0, -1))
    result = smoke.RunResult("frozenlake.yaml (explorer fault)", exit_code, 200.0)
    smoke.check_fault(result, "explorer", checkpoints, log, ended_at=fault_at + delay)
    return result


def test_a_fault_run_that_ends_soon_and_names_the_fault_passes(tmp_path):
    result = fault_run(tmp_path)
    assert result.ok, [c for c in result.checks if not c.ok]
    assert result.fault_to_exit_s == pytest.approx(30.0)


@pytest.mark.parametrize("broken,failing", [
    (dict(exit_code=0), "non-zero exit"),
    (dict(delay=400.0), f"exit within {smoke.FAULT_DEADLINE} s of the fault"),
    (dict(output="error: training failed: something else\n"), "the explorer fault named in the launcher's error"),
    (dict(output=f"error: training failed: {smoke.INJECTED_FAULT}\ntraining finished: 2 step(s)\n"),
     "never reported finished"),
])
def test_the_fault_checks_catch_a_run_that_hangs_hides_or_lies(tmp_path, broken, failing):
    result = fault_run(tmp_path, **broken)
    assert failing in [c.name for c in result.checks if not c.ok]


@pytest.mark.parametrize("config,gpus,plan", [
    ("frozenlake_difficulty.yaml", 4, "1 node(s) x 4 GPU(s): 2 rollout engine(s) x 1 GPU, trainer 2 GPU(s)"),
    # upstream's FrozenLake layout
    ("frozenlake_difficulty.yaml", 8, "1 node(s) x 8 GPU(s): 6 rollout engine(s) x 1 GPU, trainer 2 GPU(s)"),
    ("config_difficulty.yaml", 4, "1 node(s) x 4 GPU(s): 2 rollout engine(s) x 1 GPU, trainer 2 GPU(s)"),
    ("config_difficulty.yaml", 8, "1 node(s) x 8 GPU(s): 4 rollout engine(s) x 1 GPU, trainer 4 GPU(s)"),
])
def test_on_4_and_8_gpus_the_smoke_launch_plans_several_engines_and_a_sharded_trainer(config, gpus, plan, sample_work,
                                                                                     tmp_path):
    """What the smoke will run on a 4- or 8-GPU machine (it takes the GPU count from the machine)."""
    config_only_model(tmp_path / "model")
    copy_sample_data(sample_work, tmp_path / "work")
    command = smoke.command_for(config, tmp_path / "work", tmp_path / "model", tmp_path / "ckpt")
    assert plan in dry_run(command, gpus)
