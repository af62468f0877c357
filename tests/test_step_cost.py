"""experiments/step_cost.py up to the GPU: its launches pass Trinity's checker at real scale, and its summary."""


import pytest

from experiments import step_cost

from conftest import copy_sample_data, dry_run, config_only_model, write_scalars

WAIT = "explorer/time/wait_explore_step"


@pytest.mark.parametrize("example,expected", [
    ("frozenlake", "group 16, batch 32 tasks (1024 experiences), lr 1e-06"),
    ("math", "group 8, batch 16 tasks (128 experiences), lr 1e-06"),
])
def test_the_real_scale_launch_passes_trinitys_checker(example, expected, sample_work, tmp_path):
    config_only_model(tmp_path / "model")
    copy_sample_data(sample_work, tmp_path / "work")
    command = step_cost.command(example, tmp_path / "model", tmp_path / "work", tmp_path / "ckpt", 4, 256)
    out = dry_run(command)
    assert expected in out and "response 256" in out


def test_extra_settings_come_last_so_they_win(sample_work, tmp_path):
    copy_sample_data(sample_work, tmp_path / "work")
    command = step_cost.command("frozenlake", tmp_path / "model", tmp_path / "work", tmp_path / "ckpt", 2, 256,
                                ("explorer.runner_per_model=24",))
    assert command[-1] == "--set=explorer.runner_per_model=24"
    config_only_model(tmp_path / "model")
    assert "runners/engine 24" in dry_run(command)


def test_the_summary_counts_explore_steps_leaves_out_the_first_and_estimates_a_full_run(tmp_path):
    """Two trainer steps per explore step, as multi-step GRPO makes when each move is an experience."""
    run = tmp_path / "run"
    train = [(50.0, 1100.0), (10.0, 1110.0), (12.0, 1120.0), (14.0, 1130.0), (8.0, 1140.0), (6.0, 1150.0)]
    write_scalars(run, "trainer", {
        "time/train_step": [(step, seconds, wall) for step, (seconds, wall) in enumerate(train, start=1)],
        step_cost.TRAINER_PEAK: [(step, 30.0 + step, wall) for step, (_, wall) in enumerate(train, start=1)]})
    write_scalars(run, "explorer", {WAIT: [(step, 7.0 * step, wall)
                                           for step, wall in enumerate([1100.0, 1125.0, 1150.0], start=1)]})
    result = step_cost.summarize(run, launched_at=1000.0, estimate_steps=100)
    per_step = result["seconds per step (mean of steps 2..)"]
    assert per_step["rollout wait (explorer)"] == pytest.approx(17.5)  # steps 2 and 3: 14 and 21
    assert per_step["train step"] == pytest.approx(10.0)  # trainer steps 2..6
    assert per_step["weight sync"] is None
    assert (result["explore steps"], result["trainer steps"]) == (3, 6)
    assert result["seconds to first step"] == pytest.approx(100.0)
    assert result["explorer seconds per explore step"] == pytest.approx(25.0)
    assert result["explorer figure from"] == "wall time between explore steps"
    assert result["trainer seconds per explore step"] == pytest.approx(10.0 * 6 / 3)  # step 1's warm-up left out
    assert result["seconds per explore step (the slower side)"] == pytest.approx(25.0)  # the explorer here
    assert result["estimate for 100 steps (hours)"] == pytest.approx((100 + 100 * 25) / 3600)
    assert result["trainer peak allocated (GiB)"] == 36.0
    steps = result["trainer steps, one by one"]
    assert [row["step"] for row in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[1] == {"step": 2, "seconds": 10.0, "peak allocated (GiB)": 32.0}


def test_the_estimate_follows_the_trainer_when_it_is_the_slower_side(tmp_path):
    """As in the first math run: rollouts 98 s apart, 162 s of training per step."""
    run = tmp_path / "run"
    write_scalars(run, "trainer", {"time/train_step": [(1, 174.0, 1570.0), (2, 162.0, 1740.0)]})
    write_scalars(run, "explorer", {WAIT: [(1, 98.0, 1385.0), (2, 98.0, 1483.0)]})
    result = step_cost.summarize(run, launched_at=1000.0, estimate_steps=200)
    assert result["explorer seconds per explore step"] == pytest.approx(98.0)
    assert result["seconds per explore step (the slower side)"] == pytest.approx(162.0)
    assert result["estimate for 200 steps (hours)"] == pytest.approx((385 + 200 * 162) / 3600)


def test_a_run_that_failed_before_a_second_step_is_summarised_without_an_estimate(tmp_path):
    run = tmp_path / "run"
    write_scalars(run, "explorer", {WAIT: [(1, 104.3, 1300.0)]})
    result = step_cost.summarize(run, launched_at=1000.0, estimate_steps=200)
    assert (result["explore steps"], result["trainer steps"]) == (1, 0)
    assert result["seconds to first step"] == pytest.approx(300.0)
    assert result["seconds at step 1 (warm-ups included)"]["rollout wait (explorer)"] == pytest.approx(104.3)
    assert result["seconds at step 1 (warm-ups included)"]["train step"] is None
    assert not any(key.startswith("estimate") for key in result)


def test_a_failed_launch_still_leaves_its_figures_and_exit_code(tmp_path, monkeypatch):
    """As on the H200: step 1's rollouts logged, then the trainer ran out of memory (exit 1)."""
    import json

    from runkit import tiny_model
    from runkit.steps import Step

    def random_model(folder, architecture, tokenizer, device):
        assert architecture == "Qwen3-0.6B" and device == "cuda"
        folder.mkdir(parents=True)
        return folder

    def failing_launch(command, log_file, **kw):
        assert "--set=explorer.runner_per_model=64" in command
        run = tmp_path / "out" / "work" / "checkpoints" / "math" / "AgentScope-MathBOTS" / "math-difficulty"
        (run / "log").mkdir(parents=True)
        write_scalars(run, "explorer", {WAIT: [(1, 104.3)]})
        log_file.write_text("error: training failed: Error in Trainer: torch.OutOfMemoryError\n")
        return Step(1, 433.0)

    monkeypatch.setattr(tiny_model, "build_random_model", random_model)
    monkeypatch.setattr(step_cost, "run_step", failing_launch)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)  # the launch is the fixture above
    assert step_cost.main(["math", "--out", str(tmp_path / "out"), "--steps", "2",
                           "--set", "explorer.runner_per_model=64"]) == 1
    result = json.loads((tmp_path / "out" / "math.json").read_text())
    assert result["exit code"] == 1 and result["settings"] == ["explorer.runner_per_model=64"]
    assert (result["explore steps"], result["trainer steps"]) == (1, 0)
    assert result["seconds per step (mean of steps 2..)"]["rollout wait (explorer)"] is None  # only step 1


def test_a_trainer_that_finished_only_step_1_is_counted_with_its_warm_up(tmp_path):
    run = tmp_path / "run"
    write_scalars(run, "trainer", {"time/train_step": [(1, 120.0, 1300.0)]})
    write_scalars(run, "explorer", {WAIT: [(1, 60.0, 1200.0), (2, 60.0, 1260.0)]})
    result = step_cost.summarize(run, launched_at=1000.0, estimate_steps=10)
    assert result["seconds per step (mean of steps 2..)"]["train step"] is None
    assert result["seconds at step 1 (warm-ups included)"]["train step"] == pytest.approx(120.0)
    assert result["trainer seconds per explore step"] == pytest.approx(120.0 / 2)
    assert result["seconds per explore step (the slower side)"] == pytest.approx(60.0)


def test_a_run_stopped_after_one_explore_step_counts_its_trainer_steps_from_the_experiences(tmp_path):
    """As the 3B FrozenLake run on one H200: 4,096 experiences (512 episodes x 8 moves) in one explore
    step, the machine given back after 3 of the 8 trainer steps they fill at 512 a step."""
    run = tmp_path / "run"
    write_scalars(run, "trainer", {"time/train_step": [(1, 114.0, 1700.0), (2, 122.0, 1822.0), (3, 120.0, 1942.0)]})
    write_scalars(run, "explorer", {WAIT: [(1, 97.0, 1613.0)], step_cost.EXPERIENCES: [(1, 4096.0, 1613.0)]})
    cut = step_cost.summarize(run, launched_at=1000.0, estimate_steps=700, train_batch=512)
    assert cut["experiences per explore step"] == 4096.0
    assert cut["trainer steps per explore step"] == pytest.approx(8.0)
    assert cut["trainer seconds per explore step"] == pytest.approx(121.0 * 8)  # steps 2 and 3
    assert cut["explorer seconds per explore step"] == pytest.approx(97.0)
    assert cut["explorer figure from"].startswith("step 1's rollout wait")
    assert cut["estimate for 700 steps (hours)"] == pytest.approx((613 + 700 * 121.0 * 8) / 3600)
    # Without the train batch only the trainer steps that ran are counted: 3, not 8.
    uncounted = step_cost.summarize(run, launched_at=1000.0, estimate_steps=700)
    assert uncounted["trainer steps per explore step"] == pytest.approx(3.0)


@pytest.mark.parametrize("example,settings,expected", [
    ("frozenlake", [], 1024),  # upstream's train_batch_size
    ("frozenlake", ["buffer.train_batch_size=640"], 640),
    ("math", ["algorithm.repeat_times=4"], 64),  # batch 16 x group 4: Trinity's default train batch
])
def test_the_train_batch_comes_from_the_shipped_config_and_the_settings(example, settings, expected):
    assert step_cost.train_batch(example, settings) == expected


def test_report_only_summarises_a_fetched_run_folder_and_names_what_is_wrong(tmp_path, capsys):
    import json

    run = tmp_path / "run"
    write_scalars(run, "trainer", {"time/train_step": [(1, 114.0, 1700.0), (2, 122.0, 1822.0)]})
    write_scalars(run, "explorer", {WAIT: [(1, 97.0, 1613.0)], step_cost.EXPERIENCES: [(1, 2048.0, 1613.0)]})
    out = tmp_path / "out"
    assert step_cost.main(["frozenlake", "--out", str(out), "--report-only", str(run),
                           "--launched-at", "1970-01-01 00:16:40"]) == 0
    result = json.loads((out / "frozenlake.json").read_text())
    assert result["report of"] == str(run) and result["seconds to first step"] == pytest.approx(613.0)
    assert result["trainer steps per explore step"] == pytest.approx(2.0)  # 2,048 experiences / 1,024
    with pytest.raises(SystemExit, match="--launched-at 'yesterday'"):
        step_cost.main(["frozenlake", "--out", str(out), "--report-only", str(run), "--launched-at", "yesterday"])
    with pytest.raises(SystemExit, match=f"--report-only {tmp_path}: no monitor/tensorboard"):
        step_cost.main(["frozenlake", "--out", str(out), "--report-only", str(tmp_path), "--launched-at", "2026-12-01"])
    corrupt = tmp_path / "corrupt" / "monitor" / "tensorboard" / "trainer"
    corrupt.mkdir(parents=True)
    (corrupt / "events.out.tfevents.1.host").write_bytes(b"cut short")
    with pytest.raises(SystemExit, match="its event files hold no steps"):
        step_cost.main(["frozenlake", "--out", str(out), "--report-only", str(tmp_path / "corrupt"),
                        "--launched-at", "2026-12-01"])
