"""The configs keep upstream's values (docs/upstream.md), and upstream's names still work."""

import asyncio

import pytest
import yaml

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

PLAN = cluster.plan_cluster(1, 8, 1, None)  # 4 engines


def validated(name, tmp_path, workflow, judge=None, overrides=None):
    raw = load_yaml(REPO / "configs" / name)
    config = resolve_config(raw, {"checkpoint_root_dir": str(tmp_path), **(overrides or {})}, PLAN)
    return validate(config, workflow, judge)


@pytest.mark.parametrize("name", ["config_random.yaml", "config_difficulty.yaml"])
def test_math_configs_keep_upstreams_values(name, tmp_path):
    config = validated(name, tmp_path, run_react_agent, gsm8k_judge)
    assert config.model.model_path == "Qwen/Qwen3-0.6B"
    assert (config.model.max_model_len, config.model.max_response_tokens, config.model.temperature) == \
        (24576, 16384, 1.0)
    assert (config.algorithm.algorithm_type, config.algorithm.repeat_times, config.buffer.batch_size) == \
        ("multi_step_grpo", 8, 16)
    assert config.algorithm.optimizer.lr == 1e-6
    assert (config.synchronizer.sync_method.value, config.synchronizer.sync_interval,
            config.synchronizer.sync_timeout) == ("nccl", 4, 7200)
    assert (config.explorer.max_timeout, config.explorer.eval_interval, config.explorer.runner_per_model) == \
        (1200, 20, 16)
    assert [taskset.repeat_times for taskset in config.buffer.explorer_input.eval_tasksets] == [1]
    rollout = config.explorer.rollout_model
    assert (rollout.tool_call_parser, rollout.reasoning_parser) == ("hermes", "deepseek_r1")
    assert (config.trainer.save_interval, config.trainer.use_dynamic_bsz,
            config.trainer.ulysses_sequence_parallel_size) == (100, True, 1)
    assert (rollout.engine_num, config.cluster.gpu_per_node) == (4, 8)  # upstream: 4 engines on 8 GPUs


@pytest.mark.parametrize("name", ["frozenlake.yaml", "frozenlake_difficulty.yaml"])
def test_frozenlake_configs_keep_upstreams_main_py_and_tune_template_values(name, tmp_path):
    config = validated(name, tmp_path, run_frozen_lake)
    assert config.model.model_path == "Qwen/Qwen2.5-3B-Instruct"
    assert (config.model.max_model_len, config.model.max_response_tokens) == (25600, 2048)
    assert (config.algorithm.repeat_times, config.buffer.batch_size, config.algorithm.optimizer.lr) == \
        (16, 32, 1e-6)
    assert config.explorer.rollout_model.reasoning_parser is None
    # agentscope's tune() template, used when no YAML is given
    assert (config.explorer.runner_per_model, config.explorer.max_timeout,
            config.explorer.max_repeat_times_per_runner) == (16, 3600, 1)
    assert (config.synchronizer.sync_style.value, config.synchronizer.sync_method.value,
            config.synchronizer.sync_interval, config.synchronizer.sync_timeout) == \
        ("explorer_driven", "nccl", 1, 7200)  # Trinity's own name for dynamic_by_explorer
    assert (config.trainer.save_interval, config.explorer.eval_interval) == (100, 100)


def test_upstreams_selector_names_still_work(tmp_path, capsys):
    """`task_selector` and `difficulty_based`, as upstream's config_difficulty.yaml writes them."""
    config = yaml.safe_load((REPO / "configs" / "config_difficulty.yaml").read_text())
    taskset = config["buffer"]["explorer_input"]["taskset"]
    taskset["task_selector"] = taskset.pop("data_selector")
    taskset["task_selector"]["selector_type"] = "difficulty_based"
    upstream_named = tmp_path / "upstream_difficulty.yaml"
    upstream_named.write_text(yaml.safe_dump(config))
    code = math_main.main(["--config", str(upstream_named), "--dry-run", "--gpus", "8",
                           "--checkpoint-dir", str(tmp_path / "ckpt")])
    out = capsys.readouterr().out
    assert code == 0
    assert "selector difficulty_based" in out and "selector difficulty_based_resumable" not in out
    assert "['qwen2.5_7b_pass_rate', 'qwen3_30b_pass_rate']" in out
    assert "operators       ['pass_rate_calculator']" in out


def test_upstreams_engine_split_is_one_flag_away(tmp_path, capsys):
    from frozenlake import main as frozenlake_main

    code = frozenlake_main.main(["--dry-run", "--gpus", "8", "--engines", "6", "--checkpoint-dir", str(tmp_path)])
    assert code == 0
    assert "1 node(s) x 8 GPU(s): 6 rollout engine(s) x 1 GPU, trainer 2 GPU(s)" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["config_random.yaml", "config_difficulty.yaml"])
def test_math_micro_batches_hold_one_full_length_sequence_not_two(name, tmp_path):
    """Trinity's default (2 x max_model_len tokens per micro-batch) ran an H200 out of memory
    (docs/results/2026-12-01-step-cost.md)."""
    config = validated(name, tmp_path, run_react_agent, gsm8k_judge)
    assert config.trainer.use_dynamic_bsz
    assert config.trainer.max_token_len_per_gpu == config.model.max_model_len


@pytest.mark.parametrize("name", ["frozenlake.yaml", "frozenlake_difficulty.yaml"])
def test_frozenlake_micro_batches_hold_the_longest_experience_and_no_more_than_needed(name, tmp_path):
    """An experience is one move: its prompt plus one reply. Padded, 25,600 and 8,192 tokens a micro-batch ran out
    of memory; packed, 16,384 took the 3B trainer to 61 GiB."""
    config = validated(name, tmp_path, run_frozen_lake)
    recorder = ScriptedModel(["I am not sure."] * 8)  # no move: the episode uses all 8
    asyncio.run(run_frozen_lake({"seed": 3, "size": 6, "p": 0.8}, recorder, {}))  # the largest maps
    assert len(recorder.prompts) == 8
    # every token covers at least one character; 16 tokens a message for the chat template's markers
    longest_prompt = max(sum(len(message_text(m)) + 16 for m in prompt) for prompt in recorder.prompts)
    assert longest_prompt + config.model.max_response_tokens <= config.trainer.max_token_len_per_gpu
    assert config.trainer.max_token_len_per_gpu <= 16384 < config.model.max_model_len
