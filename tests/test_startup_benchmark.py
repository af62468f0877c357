"""experiments/startup.py: each variant's launch passes Trinity's checker, and the report reads the timelines right."""

import json
from pathlib import Path

import pytest

from experiments import startup as bench
from frozenlake.example import FROZENLAKE
from rftkit import startup
from rftkit.reports.tensorboard import FINISHED_TASKS, MODEL_CALLS, ROLLOUT_WAIT
from runkit.commands import launch_command

from conftest import dry_run, hold_script_calls, write_scalars

LAUNCH = 1_800_000_000.0


def recorded_variant(out, name, phases, steps, cpu=None):
    """A variant's folder as a launch leaves it: the timeline (seconds after LAUNCH) and the explorer's
    finished tasks per explore step (seconds after LAUNCH, tasks)."""
    run = out / name / "checkpoints" / "AgentScope-FrozenLake" / "frozenlake-grpo"
    (run / "log").mkdir(parents=True)
    lines = [{"phase": "launch", "at": LAUNCH, "pid": 1, **({"cpu": cpu} if cpu else {})}]
    lines += [{"phase": phase, "at": LAUNCH + at, "pid": 2} for phase, at in phases.items()]
    (run / startup.FILE_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))
    write_scalars(run, "explorer", {FINISHED_TASKS: [(i + 1, tasks, LAUNCH + at) for i, (at, tasks) in
                                                   enumerate(steps)]})


def test_the_report_reads_phases_first_minutes_and_rollout_speed(tmp_path):
    recorded_variant(tmp_path, "default", {"Ray connected": 30, "first weights sent to the engine": 320,
                                           "first explore step": 334},
                     [(334, 8), (350, 8), (366, 8), (382, 8)])
    recorded_variant(tmp_path, "fast", {"Ray connected": 30, "first weights sent to the engine": 150,
                                        "first explore step": 162},
                     [(162, 8), (176, 8), (190, 8), (290, 8), (310, 8)], cpu="Example CPU 9000")
    text = bench.report(tmp_path, ["default", "fast"], group=16)
    assert "| the machine's CPU | - | Example CPU 9000 |" in text  # default: a timeline from before it was kept
    assert "| launch to the first explore step (s) | 334 | 162 |" in text
    # within 300 s of the launch: none of default's steps, four of fast's (8 tasks x 16 rollouts each)
    assert "| episodes finished in the first 5 minutes | 0 | 512 |" in text
    # episodes over the time from the first weights to the last step: 4 x 128 / 62 s and 5 x 128 / 160 s
    assert f"| episodes per second while exploring | {512 / 62:.1f} | {640 / 160:.1f} |" in text
    assert "| Ray connected | 30 | 30 |" in text
    assert "| model calls per second while rolling out | - | - |" in text  # no rollout waits or calls recorded
    assert (tmp_path / "startup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "startup.md").read_text() == text
    # runs stopped after 3 minutes count over those 3: default none, fast its first two steps
    shorter = bench.report(tmp_path, ["default", "fast"], 16, first_minutes=3)
    assert "| episodes finished in the first 3 minutes | 0 | 256 |" in shorter
    # and so do launches whose folders say they were given 3 minutes, when the report is drawn again
    for name in ("default", "fast"):
        (tmp_path / name / bench.RAN).write_text(json.dumps({"minutes": 3}))
    assert bench.report(tmp_path, ["default", "fast"], 16) == shorter


def test_updates_gpu_idle_and_a_variants_own_group_come_from_its_records(tmp_path):
    phases = {"first weights sent to the engine": 100, "first explore step": 110}
    recorded_variant(tmp_path, "maps16", phases, [(110, 16), (130, 16)])
    run = tmp_path / "maps16" / "checkpoints" / "AgentScope-FrozenLake" / "frozenlake-grpo"
    # the launcher's config beside the project folder: this variant played 8 rollouts a map, not the script's 16
    run.parent.with_name("AgentScope-FrozenLake-frozenlake-grpo.yaml").write_text("algorithm:\n  repeat_times: 8\n")
    write_scalars(run, "trainer", {bench.UPDATES: [(step, 2.0, LAUNCH + at) for step, at in
                                                   ((1, 115), (2, 120), (3, 125), (4, 135))]})
    # GPU samples (time, gpu, utilization, memory): before exploring, then four while exploring, one at 0%
    (run / "gpu_samples.csv").write_text("".join(f"{LAUNCH + at},0,{used},1000\n" for at, used in
                                                 ((50, 0), (105, 90), (115, 0), (120, 80), (130, 70))))
    # each step's wait for its rollouts and its episodes' calls: (5 x 128 + 7 x 128) calls over 4 + 6 s
    write_scalars(run, "explorer", {ROLLOUT_WAIT: [(1, 4.0, LAUNCH + 110), (2, 6.0, LAUNCH + 130)],
                                    MODEL_CALLS: [(1, 5.0, LAUNCH + 110), (2, 7.0, LAUNCH + 130)]})
    text = bench.report(tmp_path, ["maps16"], group=16)
    assert "| episodes per second while exploring | 8.5 |" in text  # 2 steps x 16 maps x 8 rollouts over 30 s
    assert "| model calls per second while rolling out | 154 |" in text
    assert "| trainer updates per minute, first to last | 9.0 |" in text  # 3 updates after the first in 20 s
    assert "| GPU samples at 0% while exploring | 25% |" in text


def test_a_variant_that_never_started_is_named(tmp_path):
    (tmp_path / "default").mkdir()
    with pytest.raises(SystemExit, match="default: no run below checkpoints"):
        bench.report(tmp_path, ["default"], group=16)


@pytest.mark.parametrize("text,expected", [("default", ("default", [])),
                                           ("fast=a.b=1,c=x", ("fast", ["a.b=1", "c=x"]))])
def test_variants_are_a_name_and_their_settings(text, expected):
    assert bench.parse_variant(text) == expected


@pytest.mark.parametrize("text", ["=a=1", "fast=a", "x/y"])
def test_a_malformed_variant_is_refused(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_variant(text)


def test_a_variants_launch_passes_trinitys_checker_with_its_settings_last(sample_work, tmp_path):
    data = sample_work / "data" / "frozenlake"
    command = launch_command(FROZENLAKE, model=Path("Qwen/Qwen2.5-0.5B-Instruct"), checkpoints=tmp_path / "ckpt",
                             data={"train": data, "eval": data}, settings=bench.SETTINGS,
                             extra=["explorer.runner_prepare_concurrency=64", "explorer.runner_per_model=6"])
    out = dry_run(command, gpus=1)
    assert "runners/engine 6, each playing up to 4 episodes at once" in out  # the variant's value wins
    assert "group 16, batch 8 tasks" in out
    command = launch_command(FROZENLAKE, model=Path("Qwen/Qwen2.5-0.5B-Instruct"), checkpoints=tmp_path / "ckpt",
                             data={"train": data, "eval": data}, settings=bench.SETTINGS)
    # the config's 16 asynchronous runners, which Trinity's checker caps at the 8 maps of a step on one engine
    assert ("runners/engine 8, each playing up to 4 episodes at once: 32 of a step's 128 episodes per engine in "
            "flight") in dry_run(command, gpus=1)
    command = launch_command(FROZENLAKE, model=Path("Qwen/Qwen2.5-0.5B-Instruct"), checkpoints=tmp_path / "ckpt",
                             data={"train": data, "eval": data}, settings=bench.SETTINGS,
                             extra=["explorer.max_repeat_times_per_runner=16"])
    assert "each playing up to 16 episodes at once: 128 of a step's 128 episodes" in dry_run(command, gpus=1)
    command = launch_command(FROZENLAKE, model=Path("Qwen/Qwen2.5-0.5B-Instruct"), checkpoints=tmp_path / "ckpt",
                             data={"train": data, "eval": data}, settings=bench.SETTINGS,
                             extra=["explorer.concurrent_mode=sequential"])
    assert "runners/engine 16, one episode at a time each" in dry_run(command, gpus=1)  # not capped
    command = launch_command(FROZENLAKE, model=Path("Qwen/Qwen2.5-0.5B-Instruct"), checkpoints=tmp_path / "ckpt",
                             data={"train": data, "eval": data}, settings=bench.SETTINGS,
                             extra=["explorer.over_rollout.ratio=0.125", "explorer.over_rollout.wait_after_min=0"])
    assert ("32 of a step's 128 episodes per engine in flight; a step ends 0 s after 7 of its 8 tasks are done, the "
            "rest dropped (explorer.over_rollout)") in dry_run(command, gpus=1)


def test_a_variant_gets_cold_caches_of_its_own_and_its_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/shared/cache")
    env, settings = bench.launch_env(tmp_path / "serial", ["RFTKIT_CONCURRENT_START=1", "explorer.runner_per_model=8"])
    assert settings == ["explorer.runner_per_model=8"]
    assert env["RFTKIT_CONCURRENT_START"] == "1"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "serial" / "cache" / "vllm")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "serial" / "cache" / "triton")
    warm = str(tmp_path / "serial" / "cache" / "vllm")
    env, _ = bench.launch_env(tmp_path / "warm", [f"VLLM_CACHE_ROOT={warm}"])
    assert env["VLLM_CACHE_ROOT"] == warm, "a variant that names a cache keeps it"


def test_the_rollout_holds_launches_pass_trinitys_checker_and_the_replay_reads_the_fully_async_run(sample_work,
                                                                                                   tmp_path):
    """experiments/holds/rollout_levers.sh with a `python3` on PATH that records each call instead of running it:
    every variant it launches must pass Trinity's checker with the setting it is about, the engine replay must read
    the fully_async variant's run, and the trainer settings must be read beside the padded reference."""
    out = tmp_path / "hold"
    (out / "levers" / "fullasync" / "checkpoints" / "P" / "N" / "log").mkdir(parents=True)  # as the launch leaves it
    printed, calls = hold_script_calls("experiments/holds/rollout_levers.sh", ["model.gguf", str(out)], tmp_path)
    assert printed.split() == ["levers", "rc=0", "ceiling", "rc=0", "trainer", "rc=0"]
    argvs = {argv[1]: argv for argv in calls}
    startup_argv = argvs["experiments.startup"]
    variants = dict(bench.parse_variant(startup_argv[i + 1]) for i, arg in enumerate(startup_argv)
                    if arg == "--variant")
    assert list(variants) == ["default", "noprefix", "fullasync"]
    data = sample_work / "data" / "frozenlake"
    shown = {"default": "prefix caching on", "noprefix": "prefix caching off", "fullasync": "fully asynchronous"}
    for name, pairs in variants.items():
        command = launch_command(FROZENLAKE, model=Path("Qwen/Qwen2.5-0.5B-Instruct"), checkpoints=tmp_path / name,
                                 data={"train": data, "eval": data}, settings=bench.SETTINGS, extra=pairs)
        assert shown[name] in dry_run(command, gpus=1)
    ceiling = argvs["experiments.engine_ceiling"]
    fully_async_run = out / "levers" / "fullasync" / "checkpoints" / "P" / "N"
    assert ceiling[2:4] == [str(fully_async_run), str(out / "levers" / "model")]
    assert ceiling[ceiling.index("--steps") + 1] == "1:4"  # the one window a fully_async run has (test_engine_ceiling)
    trainer = argvs["experiments.trainer_speed"]
    settings = trainer[trainer.index("--settings") + 1:]
    assert settings[0] == "sdpa-blocks" and {"liger-fused", "liger-fused-fsdp1", "liger-fused-adamw"} <= set(settings)
