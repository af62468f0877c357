"""The configs keep upstream's values (docs/upstream.md), and upstream's own config files run through our entry points.

UPSTREAM holds this test's own copy of the values in upstream's three files (agentscope-samples,
tuner/frozen_lake/config.yaml and tuner/data_augment/config_{random,difficulty}.yaml), written out as
YAML by the tests that run them.
"""

import asyncio

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from frozenlake import main as frozenlake_main
from frozenlake.workflow import run_frozen_lake
from math_bots import main as math_main
from math_bots.judge import gsm8k_judge
from math_bots.workflow import run_react_agent
from rftkit import cluster
from rftkit.overrides import load_yaml, resolve_config
from rftkit.trinity_config import validate
from rftkit.reports.evaluation import message_text

from conftest import REPO
from scripted_model import ScriptedModel

CHECKPOINTS = "${oc.env:TRINITY_CHECKPOINT_ROOT_DIR,./checkpoints}"
MATH_ROLLOUT = {"engine_num": 4, "tensor_parallel_size": 1, "enable_openai_api": True, "enable_history": True,
                "enable_auto_tool_choice": True, "tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1"}


def math_upstream(name: str, selector: dict) -> dict:
    return {
        "project": "Data-Augmentation", "name": name, "checkpoint_root_dir": CHECKPOINTS,
        "buffer": {"total_epochs": 1, "explorer_input": {
            "taskset": {"path": "path/to/your/augmented/math_data", "split": "train", "task_selector": selector},
            "eval_tasksets": [{"name": "eval-aime24", "path": "path/to/aime24_data", "split": "test"}]}},
        "synchronizer": {"sync_style": "dynamic_by_explorer", "sync_method": "nccl", "sync_interval": 4,
                         "sync_timeout": 7200},
        "monitor": {"monitor_type": "tensorboard"},
        "algorithm": {"algorithm_type": "multi_step_grpo", "repeat_times": 8, "optimizer": {"lr": "1e-6"}},
        "model": {"model_path": "${oc.env:TRINITY_MODEL_PATH,Qwen/Qwen3-0.6B}", "max_model_len": 24576,
                  "max_response_tokens": 16384, "temperature": 1.0},
        "cluster": {"node_num": 1, "gpu_per_node": 8},
        "explorer": {"eval_interval": 20, "runner_per_model": 16, "max_timeout": 1200, "rollout_model": MATH_ROLLOUT},
        "trainer": {"save_interval": 100, "use_dynamic_bsz": True, "ulysses_sequence_parallel_size": 1},
    }


UPSTREAM = {
    "frozen_lake/config.yaml": {
        "project": "AgentScope", "name": "FrozenLake", "checkpoint_root_dir": CHECKPOINTS,
        "algorithm": {"algorithm_type": "multi_step_grpo", "repeat_times": 16, "kl_loss_fn": "low_var_kl",
                      "kl_loss_fn_args": {"kl_coef": 0},
                      "advantage_fn_args": {"epsilon": "1e-6", "std_threshold": 0.0001},
                      "optimizer": {"lr": "1e-6"}},
        "model": {"model_path": "${oc.env:TRINITY_MODEL_PATH,Qwen/Qwen2.5-3B-Instruct}", "max_prompt_tokens": 23552,
                  "max_response_tokens": 2048, "max_model_len": 25600, "temperature": 1.0},
        "buffer": {"total_epochs": 5, "batch_size": 32, "train_batch_size": 1024, "trainer_input": {
            "experience_buffer": {"name": "experience_buffer", "storage_type": "queue", "max_read_timeout": 7200,
                                  "replay_buffer": {"enable": True, "priority_fn": "linear_decay",
                                                    "priority_fn_args": {"decay": 0.1}}}}},
        "explorer": {"runner_per_model": 16, "rollout_model": {
            "engine_num": 6, "tensor_parallel_size": 1, "enable_openai_api": True, "enable_history": True,
            "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
        "trainer": {"save_interval": 100, "use_dynamic_bsz": True, "grad_clip": 1.0, "max_token_len_per_gpu": 25600,
                    "ulysses_sequence_parallel_size": 2},
        "synchronizer": {"sync_style": "dynamic_by_explorer", "sync_interval": 1, "sync_timeout": 1200},
    },
    "data_augment/config_random.yaml": math_upstream("Random-Selector", {"selector_type": "random"}),
    "data_augment/config_difficulty.yaml": {
        **math_upstream("Difficulty-Based-Selector", {
            "selector_type": "difficulty_based", "feature_keys": ["qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate"],
            "kwargs": {"m": 8, "lamb": 0.1, "rho": 0.1, "target_reward": 0.8, "tau": 0, "do_sample": True}}),
        "data_processor": {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}},
    },
}
OURS = {"frozen_lake/config.yaml": "frozenlake.yaml", "data_augment/config_random.yaml": "config_random.yaml",
        "data_augment/config_difficulty.yaml": "config_difficulty.yaml"}
# Where a value of ours differs from upstream's file on purpose; docs/upstream.md says why for each.
RENAMED = ("project", "name", "buffer.explorer_input.taskset.task_selector", "buffer.explorer_input.taskset.path",
           "buffer.explorer_input.eval_tasksets", "cluster")


def leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from leaves(value, f"{dotted}.")
        else:
            yield dotted, value


def lookup(tree: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return "(missing)"
        tree = tree[key]
    return tree


def upstream_file(name: str, folder) -> str:
    path = folder / name.replace("/", "_")
    path.write_text(yaml.safe_dump(UPSTREAM[name], sort_keys=False).replace("'1e-6'", "1e-6"))
    return str(path)


@pytest.mark.parametrize("name", list(UPSTREAM))
def test_our_config_carries_every_value_of_upstreams_file(name, tmp_path, monkeypatch):
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    monkeypatch.delenv("TRINITY_MODEL_PATH", raising=False)
    theirs = load_yaml(upstream_file(name, tmp_path))
    ours = load_yaml(REPO / "configs" / OURS[name])
    kept = [(key, value) for key, value in leaves(theirs)
            if not any(key == other or key.startswith(f"{other}.") for other in RENAMED)]
    assert len(kept) > 20
    assert {key: (value, lookup(ours, key)) for key, value in kept if lookup(ours, key) != value} == {}


def test_the_bots_selector_keeps_upstreams_features_and_settings_under_its_new_names():
    theirs = UPSTREAM["data_augment/config_difficulty.yaml"]["buffer"]["explorer_input"]["taskset"]["task_selector"]
    taskset = load_yaml(REPO / "configs" / "config_difficulty.yaml")["buffer"]["explorer_input"]["taskset"]
    ours = taskset["data_selector"]
    assert ours == {**theirs, "selector_type": "difficulty_based_resumable"}


@pytest.mark.parametrize("name", ["frozenlake.yaml", "frozenlake_difficulty.yaml"])
def test_frozenlake_configs_keep_what_upstreams_main_py_passed_in_code(name, tmp_path):
    """tune(model=TunerModelConfig(...), algorithm=AlgorithmConfig(...)) in upstream's main.py."""
    raw = load_yaml(REPO / "configs" / name)
    config = validate(cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path)}),
                                        cluster.plan_cluster(1, 8, 1, None, configured=6)), run_frozen_lake)
    assert config.model.model_path == "Qwen/Qwen2.5-3B-Instruct"
    assert (config.model.max_model_len, config.model.max_response_tokens) == (25600, 2048)
    assert (config.algorithm.repeat_times, config.buffer.batch_size, config.algorithm.optimizer.lr) == \
        (16, 32, 1e-6)
    assert config.explorer.rollout_model.reasoning_parser is None
    assert (config.explorer.rollout_model.engine_num, config.cluster.trainer_gpu_num) == (6, 2)
    assert (config.trainer.save_interval, config.explorer.eval_interval) == (100, 100)
    # ours: 16 runners (upstream's count) each play 4 of a map's rollouts at once, and start together
    assert (config.explorer.concurrent_mode, config.explorer.max_repeat_times_per_runner,
            config.explorer.runner_prepare_concurrency) == ("asynchronous", 4, 16)


def test_the_episode_budgets_are_upstreams_ten_moves_on_maps_solvable_in_eight():
    from frozenlake.env import AGENT_MAX_STEPS, ENV_MAX_STEPS

    recorder = ScriptedModel(["I am not sure."] * 10)
    asyncio.run(run_frozen_lake({"seed": 3, "size": 6, "p": 0.8}, recorder, {}))
    assert (ENV_MAX_STEPS, AGENT_MAX_STEPS, len(recorder.prompts)) == (8, 10, 10)


def test_frozenlake_micro_batches_hold_the_longest_experience(tmp_path):
    """An experience is one move: its prompt plus one reply."""
    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    recorder = ScriptedModel(["I am not sure."] * 10)  # no move: the episode uses all 10
    asyncio.run(run_frozen_lake({"seed": 3, "size": 6, "p": 0.8}, recorder, {}))  # the largest maps
    # every token covers at least one character; 16 tokens a message for the chat template's markers
    longest_prompt = max(sum(len(message_text(m)) + 16 for m in prompt) for prompt in recorder.prompts)
    assert longest_prompt + raw["model"]["max_response_tokens"] <= raw["trainer"]["max_token_len_per_gpu"]


def math_splits(folder):
    rng = np.random.default_rng(0)
    weak = rng.uniform(0, 0.6, 16)
    (folder / "train").mkdir(parents=True)
    (folder / "aime").mkdir()
    pq.write_table(pa.table({"question": [f"What is {i} + {i}?" for i in range(16)],
                             "answer": [str(2 * i) for i in range(16)], "qwen2.5_7b_pass_rate": weak,
                             "qwen3_30b_pass_rate": np.clip(weak + 0.3, 0, 1)}), folder / "train" / "train.parquet")
    pq.write_table(pa.table({"question": ["What is 1 + 1?"], "answer": ["2"]}), folder / "aime" / "test.parquet")


@pytest.mark.parametrize("name,selector", [("data_augment/config_random.yaml", "selector random"),
                                           ("data_augment/config_difficulty.yaml", "selector difficulty_based")])
def test_upstreams_math_configs_run_through_our_entry_point(name, selector, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    monkeypatch.delenv("TRINITY_MODEL_PATH", raising=False)
    config = upstream_file(name, tmp_path)
    math_splits(tmp_path / "d")
    # as published: its placeholder data paths do not exist; one line, exit 2, nothing written
    with pytest.raises(SystemExit) as stop:
        math_main.main(["--config", config, "--dry-run"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    # the config's own relative paths are the checkout's (rftkit.example.PATHS_RULE)
    assert err == (f"error: {REPO}/path/to/your/augmented/math_data: no such folder (the training taskset, "
                   f"split 'train'; --train-dir sets its folder); run scripts/prepare_math_data.py first, or, "
                   f"offline, give --train-dir and --eval-dir math_bots/tasksets/gsm_symbolic (README.md, Math "
                   f"with BOTS)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", name.replace("/", "_")]
    # with the data given by flags
    code = math_main.main(["--config", config, "--dry-run", "--gpus", "8",
                           "--train-dir", "d/train", "--eval-dir", "d/aime"])
    out = capsys.readouterr().out
    assert code == 0 and selector in out
    assert f"{tmp_path}/d/train [train]" in out and f"eval taskset    eval-aime24: {tmp_path}/d/aime [test]" in out
    assert "Qwen/Qwen3-0.6B" in out and f"checkpoints     {REPO}/checkpoints/Data-Augmentation/" in out
    assert "4 rollout engine(s) x 1 GPU, trainer 4 GPU(s)" in out and "adapted to this machine: nothing" in out
    assert not list(tmp_path.rglob("*$*")) and not (tmp_path / "checkpoints").exists()


def test_upstreams_frozenlake_config_runs_through_our_entry_point(frozenlake_data, tmp_path, monkeypatch, capsys):
    """Upstream's file has no tasksets: its main.py passed the dataset in code. --data-dir gives the train split."""
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    config = upstream_file("frozen_lake/config.yaml", tmp_path)
    code = frozenlake_main.main(["--config", config, "--dry-run", "--gpus", "8", "--data-dir", str(frozenlake_data)])
    out = capsys.readouterr().out
    assert code == 0
    assert f"train taskset   train_taskset: {frozenlake_data} [train], 5 epoch(s)" in out
    assert "eval taskset" not in out  # upstream evaluated nothing
    assert "6 rollout engine(s) x 1 GPU, trainer 2 GPU(s)" in out and "Ulysses sequence parallel 2" in out
    assert "experiences     queue, read by linear_decay priority {'decay': 0.1}, each read once" in out
    assert f"checkpoints     {tmp_path / 'runs'}/AgentScope/FrozenLake" in out
    code = frozenlake_main.main(["--config", config, "--dry-run", "--gpus", "1", "--data-dir", str(frozenlake_data)])
    out = capsys.readouterr().out
    assert code == 0
    assert "explorer.rollout_model.engine_num: 6 -> 1 (one GPU" in out
    assert "trainer.ulysses_sequence_parallel_size: 2 -> 1" in out
    assert not (tmp_path / "runs").exists()


def test_upstreams_frozenlake_config_without_data_stops_with_one_line(tmp_path, capsys):
    config = upstream_file("frozen_lake/config.yaml", tmp_path)
    with pytest.raises(SystemExit) as stop:
        frozenlake_main.main(["--config", config, "--dry-run", "--data-dir", str(tmp_path / "none"),
                              "--checkpoint-dir", str(tmp_path / "c")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'none'}: no such folder (the training taskset train_taskset")
    assert err.count("\n") == 1
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("name", ["config_random.yaml", "config_difficulty.yaml"])
def test_math_micro_batches_are_upstreams_two_sequences_with_the_fused_kernel_that_lets_them_fit(name, tmp_path):
    """Upstream leaves Trinity's default, 2 x max_model_len tokens per micro-batch; with the logits held whole it
    ran an H200 out of memory (docs/results/2026-12-01-step-cost.md), so the budget stands only beside verl's
    fused log-prob kernel."""
    raw = load_yaml(REPO / "configs" / name)
    config = validate(cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path)}),
                                        cluster.plan_cluster(1, 8, 1, None)),
                      run_react_agent, gsm8k_judge)
    assert config.trainer.use_dynamic_bsz
    assert config.trainer.max_token_len_per_gpu == 2 * config.model.max_model_len
    assert raw["trainer"]["trainer_config"]["model"]["use_fused_kernels"] is True
