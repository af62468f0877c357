"""The math example short of the GPUs: both configs' dry-runs, the BOTS feedback loop, the adapter run."""

import asyncio
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from math_bots import main as math_main
from math_bots.judge import gsm8k_judge
from math_bots.workflow import run_react_agent
from rftkit import cluster
from rftkit.overrides import load_yaml, resolve_config, write_yaml
from rftkit.trinity_config import build_trinity_config
from standins.adapter_harness import run_in_adapter
from standins.fake_vllm_server import FakeVLLMServer

from conftest import REPO

CONFIGS = REPO / "configs"


def test_the_two_configs_differ_only_in_selector_and_its_operator():
    random_cfg = yaml.safe_load((CONFIGS / "config_random.yaml").read_text())
    bots_cfg = yaml.safe_load((CONFIGS / "config_difficulty.yaml").read_text())
    assert random_cfg["buffer"]["explorer_input"]["taskset"].pop("data_selector") == {"selector_type": "random"}
    selector = bots_cfg["buffer"]["explorer_input"]["taskset"].pop("data_selector")
    assert selector["selector_type"] == "difficulty_based_resumable"  # BOTS, posteriors kept on resume
    assert selector["feature_keys"] == ["qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate"]
    assert selector["kwargs"] == {"m": 8, "lamb": 0.1, "rho": 0.1, "target_reward": 0.8, "tau": 0, "do_sample": True}
    assert selector["kwargs"]["m"] == bots_cfg["algorithm"]["repeat_times"], "m should equal the group size"
    assert bots_cfg.pop("data_processor") == {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}}
    assert random_cfg.pop("name") != bots_cfg.pop("name")
    assert random_cfg == bots_cfg


@pytest.mark.parametrize("config,selector", [("config_random.yaml", "selector random"),
                                             ("config_difficulty.yaml", "selector difficulty_based_resumable")])
def test_dry_run_validates_both_configs(sample_work, tmp_path, capsys, config, selector):
    data = sample_work / "data" / "math_bots"
    code = math_main.main(["--config", str(CONFIGS / config), "--dry-run", "--gpus", "8",
                           "--checkpoint-dir", str(tmp_path / "ckpt"), "--train-dir", str(data / "guru_math"),
                           "--eval-dir", str(data / "aime24")])
    out = capsys.readouterr().out
    assert code == 0 and selector in out
    assert "multi_step_grpo: group 8, batch 16 tasks (128 experiences), lr 1e-06" in out
    assert "Qwen/Qwen3-0.6B" in out and "every 20 steps" in out and "aime24" in out
    assert "math_bots.workflow.run_react_agent, judge math_bots.judge.gsm8k_judge" in out
    assert ("pass_rate_calculator" in out) == (config == "config_difficulty.yaml")
    assert not (tmp_path / "ckpt").exists()


def gsm8k_rows(n, rng):
    weak = rng.uniform(0, 0.6, n)
    return pa.table({"question": [f"What is {i} + {i}?" for i in range(n)],
                     "answer": [f"#### {2 * i}" for i in range(n)],
                     "qwen2.5_7b_pass_rate": weak, "qwen3_30b_pass_rate": np.clip(weak + 0.3, 0, 1)})


@pytest.fixture
def bots_config(tmp_path):
    """config_difficulty.yaml, exactly as the launcher resolves it, on a 64-task training split written here."""
    rng = np.random.default_rng(0)
    for name, n in (("train", 64), ("test", 8)):
        (tmp_path / name).mkdir()
        pq.write_table(gsm8k_rows(n, rng), tmp_path / name / f"{name}.parquet")
    raw = load_yaml(CONFIGS / "config_difficulty.yaml")
    config = cluster.with_plan(resolve_config(raw, {
        "buffer.explorer_input.taskset.path": str(tmp_path / "train"),
        "buffer.explorer_input.eval_tasksets.0.path": str(tmp_path / "test"),
        "buffer.explorer_input.eval_tasksets.0.split": "test",
        "checkpoint_root_dir": str(tmp_path / "ckpt")}), cluster.plan_cluster(1, 2, 1, None))
    return build_trinity_config(write_yaml(config, tmp_path / "config.yaml"),
                                       run_react_agent, gsm8k_judge)


def test_bots_feedback_moves_the_posterior_of_fed_back_tasks(bots_config):
    from trinity.buffer.operators import create_operators
    from trinity.buffer.selector.selector import DifficultyBasedSelector
    from trinity.buffer.task_scheduler import get_taskset_scheduler
    from trinity.common.experience import Experience

    scheduler = get_taskset_scheduler({}, bots_config)
    selector = scheduler.tasksets[0].reader.selector
    assert isinstance(selector, DifficultyBasedSelector)
    estimator = selector.diff_estimator
    operators = create_operators(bots_config.data_processor.experience_pipeline.operators)
    assert [type(op).__name__ for op in operators] == ["ExperienceOperatorV1Wrapper"]
    group = bots_config.algorithm.repeat_times

    async def one_step(step):
        tasks = await scheduler.read()
        assert len(tasks) == bots_config.buffer.batch_size
        indices = [task.index["index"] for task in tasks]
        assert all(task.index["taskset_id"] == 0 for task in tasks)
        # Alternate all-pass and all-fail groups: the two kinds a GRPO step learns nothing from.
        pass_rates = {index: float((i + step) % 2) for i, index in enumerate(indices)}
        experiences = [Experience(tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2, reward=pass_rates[index],
                                  info={"task_index": dict(task.index)})
                       for task, index in zip(tasks, indices) for _ in range(group)]
        before = estimator.predict_pr(indices=np.array(indices)).copy()
        metrics = {}
        for op in operators:
            experiences, op_metrics = await op.process(experiences)
            metrics.update(op_metrics)
        assert metrics["selector_metric"][0]["indices"] == indices
        scheduler.feedback(metrics)
        after = estimator.predict_pr(indices=np.array(indices))
        for index, b, a in zip(indices, before, after):
            if pass_rates[index] == 1.0:
                assert a > b, f"task {index} passed every rollout but its estimate fell: {b:.3f} -> {a:.3f}"
            else:
                assert a < b, f"task {index} failed every rollout but its estimate rose: {b:.3f} -> {a:.3f}"
        return indices

    first = asyncio.run(one_step(0))
    second = asyncio.run(one_step(1))
    assert estimator.cap_coef is not None
    assert scheduler.state_dict()[0]["current_index"] == 2 * bots_config.buffer.batch_size
    assert first != second

    # Resume as the Explorer does, from the saved taskset state: the posteriors come back.
    state = json.loads(json.dumps({"taskset_states": scheduler.state_dict(), "latest_iteration": 2}))
    resumed = get_taskset_scheduler(state, bots_config).tasksets[0].reader.selector.diff_estimator
    assert np.array_equal(resumed.alphas, estimator.alphas) and np.array_equal(resumed.betas, estimator.betas)
    assert resumed.cap_coef == pytest.approx(estimator.cap_coef)


def test_react_agent_inside_the_tuner_adapter_yields_the_judges_reward():
    script = [("execute_python_code", {"code": "print(25 + 49)"}), "25 + 49 = \\boxed{74}."]
    with FakeVLLMServer(lambda body: script.pop(0)) as server:
        experiences = asyncio.run(run_in_adapter(
            run_react_agent, {"question": "What is 25 + 49?", "answer": "#### 74"}, server.url,
            judge_func=gsm8k_judge))
    assert len(experiences) == 2 and all(e.reward == 1.0 for e in experiences)
    metrics = dict(experiences[-1].metrics)
    assert 0 < metrics.pop("model_seconds") < 30  # both calls to the fake server, timed (rftkit.timed_model)
    assert metrics == {"accuracy": 1.0, "format": 1.0, "tool_calls": 1.0, "model_calls": 2.0}
    tool_result = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_result and "74" in str(tool_result[0]["content"]), "the code really ran"
    tool_schemas = server.requests[0]["tools"]
    assert [t["function"]["name"] for t in tool_schemas] == ["execute_python_code"]
    assert "timeout" not in tool_schemas[0]["function"]["parameters"]["properties"]


def test_wrong_answer_inside_the_adapter_scores_zero():
    with FakeVLLMServer(lambda body: "I think it is \\boxed{75}.") as server:
        experiences = asyncio.run(run_in_adapter(
            run_react_agent, {"question": "What is 25 + 49?", "answer": "#### 74"}, server.url,
            judge_func=gsm8k_judge))
    assert [e.reward for e in experiences] == [0.0]
    metrics = {key: value for key, value in experiences[-1].metrics.items() if key != "model_seconds"}
    assert metrics == {"accuracy": 0.0, "format": 1.0, "tool_calls": 0.0, "model_calls": 1.0}


def test_code_execution_is_cut_off_at_the_timeout():
    from math_bots.python_tool import make_toolkit

    async def run():
        toolkit = make_toolkit(code_timeout=1)
        call = {"type": "tool_use", "id": "1", "name": "execute_python_code",
                "input": {"code": "import time; time.sleep(30)"}}
        chunks = [chunk async for chunk in await toolkit.call_tool_function(call)]
        return chunks[-1].content[0]["text"]

    import time
    start = time.monotonic()
    text = asyncio.run(run())
    assert time.monotonic() - start < 10
    assert "timeout" in text.lower() or "timed out" in text.lower(), text


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_training_without_gpu_exits_nonzero(tmp_path, capsys):
    assert math_main.main(["--config", str(CONFIGS / "config_random.yaml"),
                           "--checkpoint-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "training needs a CUDA GPU" in err and len(err.strip().splitlines()) == 1


def test_launch_refuses_to_start_without_data(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "detect_cluster", lambda: (1, 2))
    (tmp_path / "aime").mkdir()
    pq.write_table(gsm8k_rows(2, np.random.default_rng(0)), tmp_path / "aime" / "test.parquet")
    (tmp_path / "train").mkdir()  # a folder without the split
    with pytest.raises(SystemExit, match=f"{tmp_path / 'train' / 'train.parquet'}: no such file \\(the training "
                                         f"taskset guru_math, split 'train'; --train-dir sets its folder\\); "
                                         f"run scripts/prepare_math_data.py"):
        math_main.main(["--config", str(CONFIGS / "config_random.yaml"), "--train-dir", str(tmp_path / "train"),
                        "--eval-dir", str(tmp_path / "aime"), "--checkpoint-dir", str(tmp_path / "c")])
