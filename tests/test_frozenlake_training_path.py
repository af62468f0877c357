"""What tune() launches, short of the GPUs: the dry-run config, and the workflow inside Trinity's adapter."""

import argparse
import asyncio

import pytest
import torch
import yaml

from frozenlake import main as frozenlake_main
from frozenlake.policies import OracleModel, grid_from_prompt, last_user_text
from frozenlake.workflow import run_frozen_lake
from rftkit import cluster, launch, startup
from rftkit.overrides import load_yaml, resolve_config, write_yaml
from rftkit.trinity_config import build_trinity_config
from standins.adapter_harness import run_in_adapter
from standins.fake_vllm_server import FakeVLLMServer

from conftest import REPO, config_only_model


def oracle_reply(body):
    grid = grid_from_prompt(last_user_text(body["messages"]))
    return f"The shortest route starts with ```{OracleModel().choose(grid)}```"


def test_episode_inside_the_tuner_adapter_yields_rewarded_experiences():
    task = {"seed": 3, "size": 6, "p": 0.7, "env_max_steps": 8}
    with FakeVLLMServer(oracle_reply) as server:
        experiences = asyncio.run(run_in_adapter(run_frozen_lake, task, server.url))
    assert len(experiences) == len(server.requests) >= 1  # one experience per model call
    assert all(e.reward == 1.0 for e in experiences)
    assert experiences[-1].metrics["success"] == 1.0
    for exp in experiences:
        response_length = len(exp.tokens) - exp.prompt_length
        assert response_length > 0 and exp.logprobs.shape == (response_length,)
    assert all(body["return_token_ids"] and body["logprobs"] for body in server.requests)


def test_failed_episode_inside_the_adapter_yields_zero_reward():
    with FakeVLLMServer(lambda body: "I refuse to move.") as server:
        experiences = asyncio.run(run_in_adapter(run_frozen_lake, {"seed": 3, "size": 6, "p": 0.7}, server.url))
    assert len(experiences) == 10 and all(e.reward == 0.0 for e in experiences)
    assert experiences[-1].metrics["invalid_actions"] == 10.0


def test_dry_run_validates_the_shipped_config_and_names_what_the_machine_changed(frozenlake_data, tmp_path, capsys,
                                                                                   monkeypatch):
    def no_cluster():
        raise AssertionError("a dry run given --gpus looked for a Ray cluster")

    monkeypatch.setattr(cluster, "detect_cluster", no_cluster)  # the plan is given: nothing to detect
    code = frozenlake_main.main(["--dry-run", "--gpus", "2", "--checkpoint-dir", str(tmp_path / "ckpt"),
                                 "--data-dir", str(frozenlake_data)])
    out = capsys.readouterr().out
    assert code == 0
    assert "multi_step_grpo: group 16, batch 32 tasks (1024 experiences), lr 1e-06" in out
    assert "Qwen/Qwen2.5-3B-Instruct" in out
    assert "1 node(s) x 2 GPU(s): 1 rollout engine(s) x 1 GPU, trainer 1 GPU(s)" in out
    assert f"{frozenlake_data} [train]" in out and f"{frozenlake_data} [test]" in out
    assert "frozenlake.workflow.run_frozen_lake" in out
    adapted = out[out.index("adapted to this machine:"):]
    assert "explorer.rollout_model.engine_num: 6 -> 1 (the config's 6 engine(s) x 1 GPU leave the trainer none " \
           "of the 2 GPUs: half of them)" in adapted
    assert "trainer.ulysses_sequence_parallel_size: 2 -> 1 (the trainer has 1 GPU(s)" in adapted
    assert not (tmp_path / "ckpt").exists(), "a dry run must not create the checkpoint folder"


def test_a_launch_warns_of_eval_maps_with_training_layouts(frozenlake_data, tmp_path, capsys):
    """Held out by content: an eval split holding 3 training maps under new ids gets one line naming how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = pq.read_table(frozenlake_data / "train.parquet").to_pylist()
    test = pq.read_table(frozenlake_data / "test.parquet").to_pylist()
    pq.write_table(pa.Table.from_pylist(train), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(test[:7] + [dict(r, uid=f"new{i}") for i, r in enumerate(train[:3])]),
                   tmp_path / "test.parquet")
    for folder, expected in ((frozenlake_data, []), (tmp_path, ["3 of 10 tasks are also in the training split"])):
        assert frozenlake_main.main(["--dry-run", "--gpus", "1", "--checkpoint-dir", str(tmp_path / "ckpt"),
                                     "--data-dir", str(folder)]) == 0
        warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert len(warnings) == len(expected) and all(e in w for e, w in zip(expected, warnings)), warnings


def test_on_eight_gpus_the_dry_run_keeps_upstreams_layout(frozenlake_data, tmp_path, capsys):
    assert frozenlake_main.main(["--dry-run", "--gpus", "8", "--checkpoint-dir", str(tmp_path),
                                 "--data-dir", str(frozenlake_data)]) == 0
    out = capsys.readouterr().out
    assert "1 node(s) x 8 GPU(s): 6 rollout engine(s) x 1 GPU, trainer 2 GPU(s)" in out
    assert "Ulysses sequence parallel 2" in out and "adapted to this machine: nothing" in out


def test_a_data_folder_from_the_environment_that_is_missing_is_blamed_on_the_variable(tmp_path, capsys,
                                                                                      monkeypatch):
    monkeypatch.setenv("FROZENLAKE_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit):
        frozenlake_main.main(["--dry-run", "--checkpoint-dir", str(tmp_path / "ckpt")])
    assert capsys.readouterr().err.startswith(
        f"error: {tmp_path / 'nowhere'}: no such folder (the training taskset frozenlake_train, split 'train'; "
        f"FROZENLAKE_DATA_DIR sets its folder)")


@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_a_dry_run_without_the_data_fails_naming_the_flag(folder, tmp_path, capsys):
    data = tmp_path / "frozenlak"  # a typo'd folder
    if folder == "empty":
        data.mkdir()
    with pytest.raises(SystemExit) as stop:
        frozenlake_main.main(["--dry-run", "--checkpoint-dir", str(tmp_path / "ckpt"), "--data-dir", str(data)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    where = f"{data}: no such folder" if folder == "missing" else f"{data / 'train.parquet'}: no such file"
    assert err.startswith(f"error: {where} (the training taskset frozenlake_train, split 'train'; "
                          f"--data-dir sets its folder)")
    assert "scripts/get_frozenlake_data.py" in err and err.count("\n") == 1
    assert not (tmp_path / "ckpt").exists() and (folder == "empty") == data.exists()


def test_dry_run_surfaces_trinity_validation_errors(frozenlake_data, tmp_path, capsys):
    config = load_yaml(REPO / "configs" / "frozenlake.yaml")
    config["model"]["max_prompt_tokens"] = 25000  # plus 2048 response tokens > max_model_len 25600
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as stop:
        frozenlake_main.main(["--dry-run", "--config", str(bad), "--checkpoint-dir", str(tmp_path / "c"),
                              "--data-dir", str(frozenlake_data)])
    assert stop.value.code == 2
    assert f"error: {bad}: " in capsys.readouterr().err and "max_model_len" in str(stop.value)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("nodes,gpus,tp,engines,configured,expected", [
    (1, 2, 1, None, None, 1), (1, 8, 1, None, None, 4), (1, 8, 2, None, None, 2), (2, 8, 1, None, None, 8),
    (1, 8, 1, 6, None, 6), (1, 8, 1, None, 6, 6), (1, 4, 1, None, 6, 2), (1, 8, 2, None, 4, 2),
    (1, 8, 1, 3, 6, 3), (2, 8, 1, None, 6, 6)])
def test_rollout_engines_are_the_configs_where_they_leave_the_trainer_a_gpu_else_half(
        nodes, gpus, tp, engines, configured, expected):
    plan = cluster.plan_cluster(nodes, gpus, tp, engines, configured=configured)
    assert {key: plan[key] for key in ("node_num", "gpu_per_node", "engine_num", "mode")} == \
        {"node_num": nodes, "gpu_per_node": gpus, "engine_num": expected, "mode": "both"}
    assert plan["trainer_gpus"] == nodes * gpus - expected * tp
    assert (plan["why"] is None) == (engines is None and configured == expected)


@pytest.mark.parametrize("trainer_gpus,sequence_parallel,expected", [(2, 2, 2), (4, 2, 2), (1, 2, 1), (3, 2, 1),
                                                                      (6, 4, 1), (8, 4, 4), (1, 1, 1)])
def test_sequence_parallelism_is_kept_where_the_trainers_gpus_hold_whole_groups(trainer_gpus, sequence_parallel,
                                                                                 expected):
    config = {"trainer": {"ulysses_sequence_parallel_size": sequence_parallel}}
    plan = {"node_num": 1, "gpu_per_node": trainer_gpus + 1, "engine_num": 1, "mode": "both",
            "trainer_gpus": trainer_gpus, "why": None}
    notes = cluster.apply_plan(config, plan)
    assert config["trainer"]["ulysses_sequence_parallel_size"] == expected
    assert len([n for n in notes if n.startswith("trainer.ulysses")]) == (expected != sequence_parallel)


def test_a_plan_that_starves_the_trainer_is_refused():
    with pytest.raises(ValueError, match="none of the 2"):
        cluster.plan_cluster(1, 2, 1, 2)
    with pytest.raises(ValueError, match="none of the 4"):
        cluster.plan_cluster(1, 4, 2, 2)


def test_resolved_config_has_absolute_paths_and_keeps_hub_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    plan = cluster.plan_cluster(1, 4, 1, None)
    config = cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": "runs"}), plan)
    assert config["checkpoint_root_dir"] == str(tmp_path / "runs")
    assert config["buffer"]["explorer_input"]["taskset"]["path"] == str(tmp_path / "data" / "frozenlake")
    assert config["model"]["model_path"] == "Qwen/Qwen2.5-3B-Instruct"
    assert config["explorer"]["rollout_model"]["engine_num"] == 2
    assert config["cluster"] == {"node_num": 1, "gpu_per_node": 4}
    assert raw["checkpoint_root_dir"] == "./checkpoints", "the loaded YAML must not be modified"


def test_upstreams_env_interpolations_resolve_with_the_variables_set_and_unset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    monkeypatch.delenv("TRINITY_MODEL_PATH", raising=False)
    unset = cluster.with_plan(resolve_config(load_yaml(REPO / "configs" / "frozenlake.yaml"), {}),
                              cluster.plan_cluster(1, 2, 1, None))
    assert unset["checkpoint_root_dir"] == str(tmp_path / "checkpoints")
    assert unset["model"]["model_path"] == "Qwen/Qwen2.5-3B-Instruct"
    config_only_model(tmp_path / "model")
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", "runs/here")
    monkeypatch.setenv("TRINITY_MODEL_PATH", "./model")
    given = cluster.with_plan(resolve_config(load_yaml(REPO / "configs" / "frozenlake.yaml"), {}),
                              cluster.plan_cluster(1, 2, 1, None))
    assert given["checkpoint_root_dir"] == str(tmp_path / "runs" / "here")
    assert given["model"]["model_path"] == str(tmp_path / "model")
    assert "$" not in yaml.safe_dump(given) and not list(tmp_path.glob("*$*"))


def test_numbers_read_as_trinity_reads_them():
    """Plain YAML reads 1e-6 as a string; Trinity's OmegaConf as a number. An advantage argument stays untyped
    in Trinity's config, so a string there would reach the advantage function."""
    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    assert raw["algorithm"]["optimizer"]["lr"] == 1e-6
    assert raw["algorithm"]["advantage_fn_args"] == {"epsilon": 1e-6, "std_threshold": 0.0001}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_training_without_gpu_exits_nonzero_with_a_clear_message(tmp_path, capsys):
    code = frozenlake_main.main(["--checkpoint-dir", str(tmp_path / "ckpt"), "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 2
    assert "training needs a CUDA GPU" in err and "--dry-run" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "d").exists()


def test_status_from_tune_decides_the_exit_code(tmp_path, monkeypatch, capsys):
    """tune() reports failure in its return value; a failed status must not exit 0."""
    import agentscope.tuner

    class Status:
        success, error, total_time_sec = False, "Trainer died: NCCL init failed", 1.0

    def tune(**kwargs):  # a run that saved its last step, whatever its status says
        from trinity.manager.state_manager import StateManager

        job_dir = tmp_path / "AgentScope-FrozenLake" / "frozenlake-grpo"
        StateManager(str(job_dir), trainer_name="trainer").save_trainer(current_step=2, sample_strategy_state={})
        return Status()

    monkeypatch.setattr(cluster, "detect_cluster", lambda: (1, 2))
    monkeypatch.setattr(cluster, "ensure_ray", lambda: False)
    monkeypatch.setattr(cluster, "connect_ray", lambda trinity_config, timeline: None)
    monkeypatch.setattr(agentscope.tuner, "tune", tune)
    args = launch_args(tmp_path, "--set", "buffer.total_steps=2", "--attn", "sdpa")
    assert launch.launch(args, run_frozen_lake) == 1
    assert "NCCL init failed" in capsys.readouterr().err
    Status.success = True
    assert launch.launch(args, run_frozen_lake) == 0
    out = capsys.readouterr().out
    assert "training finished: 2 step(s)" in out
    # the launcher's own start-up phases, printed and kept in the run's folder
    assert out.index("s  config checked") < out.index("s  Ray connected") < out.index("training finished")
    timeline = startup.read(tmp_path / "AgentScope-FrozenLake" / "frozenlake-grpo" / startup.FILE_NAME)
    assert [entry["phase"] for entry in timeline] == ["launch", "config checked", "Ray connected"]
    written = yaml.safe_load((tmp_path / "AgentScope-FrozenLake-frozenlake-grpo.yaml").read_text())
    assert written["cluster"] == {"node_num": 1, "gpu_per_node": 2}
    assert written["buffer"]["total_steps"] == 2


def launch_args(tmp_path, *flags, config="frozenlake.yaml"):
    """The launcher's parsed flags, as frozenlake/main.py would hand them over."""
    parser = argparse.ArgumentParser()
    launch.add_arguments(parser, default_config=str(REPO / "configs" / config))
    return parser.parse_args(["--checkpoint-dir", str(tmp_path), *flags])


def test_bots_config_differs_from_the_plain_one_only_in_selection():
    plain = yaml.safe_load((REPO / "configs" / "frozenlake.yaml").read_text())
    bots = yaml.safe_load((REPO / "configs" / "frozenlake_difficulty.yaml").read_text())
    selector = bots["buffer"]["explorer_input"]["taskset"].pop("data_selector")
    assert selector["feature_keys"] == ["random_pass_rate", "noisy_oracle_pass_rate"]
    assert selector["kwargs"]["m"] == bots["algorithm"]["repeat_times"] == 16
    assert bots.pop("data_processor") == {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}}
    bots["name"] = plain["name"]
    assert bots == plain


def test_bots_config_builds_its_selector_on_the_generated_maps(frozenlake_data, tmp_path):
    from trinity.buffer.task_scheduler import get_taskset_scheduler

    from rftkit.trinity_plugins.resumable_bots import ResumableDifficultyBasedSelector

    raw = load_yaml(REPO / "configs" / "frozenlake_difficulty.yaml")
    config = cluster.with_plan(resolve_config(raw, {"buffer.explorer_input.taskset.path": str(frozenlake_data),
                                         "buffer.explorer_input.eval_tasksets.0.path": str(frozenlake_data),
                                         "checkpoint_root_dir": str(tmp_path)}), cluster.plan_cluster(1, 2, 1, None))
    trinity_config = build_trinity_config(write_yaml(config, tmp_path / "c.yaml"), run_frozen_lake)
    scheduler = get_taskset_scheduler({}, trinity_config)
    selector = scheduler.tasksets[0].reader.selector
    assert isinstance(selector, ResumableDifficultyBasedSelector)
    features = selector.diff_estimator.features
    assert features.shape == (300, 2) and (features[:, 1] >= features[:, 0]).mean() > 0.9
    tasks = asyncio.run(scheduler.read())
    assert len(tasks) == 32 and {"seed", "size", "p", "random_pass_rate"} <= set(tasks[0].raw_task)


def test_launch_refuses_data_without_the_selector_features(tmp_path, monkeypatch, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"seed": [1], "size": [2], "p": [0.8]}), tmp_path / "train.parquet")
    monkeypatch.setattr(cluster, "detect_cluster", lambda: (1, 2))
    with pytest.raises(SystemExit, match="random_pass_rate"):
        frozenlake_main.main(["--config", str(REPO / "configs" / "frozenlake_difficulty.yaml"),
                              "--data-dir", str(tmp_path), "--checkpoint-dir", str(tmp_path / "c")])


def test_ensure_ray_starts_a_local_head_that_tune_can_reach():
    import ray

    try:
        ray.init(address="auto", logging_level="ERROR")
        ray.shutdown()
        pytest.skip("a Ray cluster is already running here")
    except ConnectionError:
        pass
    try:
        assert cluster.ensure_ray() is True
        ray.init(address="auto", logging_level="ERROR")  # what tune() does first
        assert ray.cluster_resources().get("CPU", 0) >= 1
        ray.shutdown()
        assert cluster.ensure_ray() is False  # already running: left alone
    finally:
        cluster.ray_cli("stop")
    with pytest.raises(ConnectionError):
        ray.init(address="auto", logging_level="ERROR")


def test_the_summary_says_whether_experiences_are_read_again(frozenlake_data, tmp_path, capsys):
    """Upstream's replay buffer sets no reuse_cooldown_time, and Trinity then reads each experience once."""
    flags = ["--dry-run", "--checkpoint-dir", str(tmp_path), "--data-dir", str(frozenlake_data)]
    assert frozenlake_main.main(flags) == 0
    assert "experiences     queue, read by linear_decay priority {'decay': 0.1}, each read once\n" in \
        capsys.readouterr().out
    cooldown = "buffer.trainer_input.experience_buffer.replay_buffer.reuse_cooldown_time=30"
    assert frozenlake_main.main([*flags, "--set", cooldown]) == 0
    assert "read by linear_decay priority {'decay': 0.1}, read again 30.0 s after each read\n" in \
        capsys.readouterr().out
