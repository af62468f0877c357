"""scripts/monitor_from_log.py: a run's scalars rebuilt from the lines Trinity-RFT's tensorboard monitor prints."""

import importlib.util
import math
from datetime import datetime, timezone

import pytest
from trinity.utils.monitor import Monitor

from conftest import REPO
from rftkit.reports.tensorboard import read_points

spec = importlib.util.spec_from_file_location("monitor_from_log", REPO / "scripts" / "monitor_from_log.py")
monitor_from_log = importlib.util.module_from_spec(spec)
spec.loader.exec_module(monitor_from_log)


def printed(role, stamp, step, data):
    """A console line as a Ray actor prints Trinity's monitor: the actor's coloured prefix, Trinity's log format,
    and the message Trinity's own formatter makes (it reads nothing of the monitor it is called on)."""
    return (f"\x1b[36m({role} pid=2800)\x1b[0m INFO 12-07 {stamp} [monitor.py:113] "
            f"{Monitor.format_data_str(None, data, step)}\n")


def console(path):
    path.write_text(
        "started hold\n"
        + printed("Explorer", "05:22:30", 1, {"rollout/success/mean": 0.203125, "rollout/finished_task_count": 8,
                                              "explorer/note": "warm-up", "rollout/model_version": 0})
        + "(Explorer pid=2800) INFO 12-07 05:22:31 [explorer.py:298] Explore step 2 started.\n"
        + printed("Trainer", "05:22:42", 1, {"actor/grad_norm": 9.05411123, "actor/kl_loss": float("nan")})
        + printed("Explorer", "05:22:36", 2, {"rollout/success/mean": 0.1875, "rollout/finished_task_count": 8})
        + printed("Trainer", "05:22:50", 2, {"actor/grad_norm": 1.5e-7}))
    return path


def test_rebuilds_each_roles_scalars_with_their_steps_values_and_times(tmp_path, capsys):
    log = console(tmp_path / "hold.out")
    assert monitor_from_log.main([str(log), str(tmp_path / "run"), "--year", "2026"]) == 0
    explorer = read_points(tmp_path / "run" / "monitor" / "tensorboard" / "explorer")
    trainer = read_points(tmp_path / "run" / "monitor" / "tensorboard" / "trainer")
    assert [(p.step, p.value) for p in explorer["rollout/success/mean"]] == [(1, 0.203125), (2, 0.1875)]
    assert [p.value for p in explorer["rollout/finished_task_count"]] == [8, 8]
    assert "explorer/note" not in explorer  # a string is not a scalar
    assert "actor/grad_norm" not in explorer and "rollout/success/mean" not in trainer
    norms = trainer["actor/grad_norm"]
    assert norms[0].value == pytest.approx(9.05411, rel=1e-6) and norms[1].value == pytest.approx(1.5e-7)
    assert math.isnan(trainer["actor/kl_loss"][0].value)
    assert norms[1].wall_time - norms[0].wall_time == 8  # the lines' own times
    first = datetime(2026, 12, 7, 5, 22, 30, tzinfo=timezone.utc)  # read as UTC, whatever this machine's zone
    assert explorer["rollout/success/mean"][0].wall_time == first.timestamp()
    assert "explorer: 5 points of 3 scalars, steps 1 to 2" in capsys.readouterr().out


def refused(argv, capsys):
    """What main() printed for an input it refuses, after checking it ended as a bad input does (exit 2)."""
    with pytest.raises(SystemExit) as raised:
        monitor_from_log.main(argv)
    assert raised.value.code == 2
    return capsys.readouterr().err


def test_refuses_a_log_without_monitor_lines_and_a_run_that_has_a_monitor(tmp_path, capsys):
    (tmp_path / "other.log").write_text("INFO nothing to read\n")
    assert "other.log: no Trinity-RFT monitor lines" in refused([str(tmp_path / "other.log"), str(tmp_path / "run")],
                                                                 capsys)
    assert not (tmp_path / "run" / "monitor").exists() and not (tmp_path / "run" / "monitor.partial").exists()
    assert "missing.log: no such file" in refused([str(tmp_path / "missing.log"), str(tmp_path / "run")], capsys)
    (tmp_path / "run" / "monitor").mkdir(parents=True)
    assert "already has monitor/" in refused([str(console(tmp_path / "hold.out")), str(tmp_path / "run")], capsys)
    assert not any((tmp_path / "run" / "monitor").iterdir())
    assert "a folder, expected the launch's output" in refused([str(tmp_path), str(tmp_path / "other")], capsys)
    (tmp_path / "file").write_text("")
    assert "cannot write there" in refused([str(tmp_path / "hold.out"), str(tmp_path / "file" / "run")], capsys)
    (tmp_path / "bad.log").write_text(printed("Trainer", "05:22:42", 1, {"a": 1.0}).replace("12-07", "02-30"))
    assert "bad.log, line 1: '02-30 05:22:42' is not a time of 2026" in refused(
        [str(tmp_path / "bad.log"), str(tmp_path / "other"), "--year", "2026"], capsys)
    assert not (tmp_path / "other").exists()
    (tmp_path / "words.log").write_text(printed("Explorer", "05:22:30", 1, {"explorer/note": "warm-up"}))
    assert "words.log: no Trinity-RFT monitor lines with a number" in refused(
        [str(tmp_path / "words.log"), str(tmp_path / "other")], capsys)
    assert not (tmp_path / "other").exists()
    assert "--year 0: expected the year the run ran in" in refused(
        [str(tmp_path / "hold.out"), str(tmp_path / "other"), "--year", "0"], capsys)


def test_a_real_runs_lines_give_back_its_tensorboard_scalars(tmp_path):
    """A kept run with both its tensorboard files and the monitor's lines of its console output beside it: every
    scalar at every step comes back, to the 6 significant digits the console prints, at the second it was
    logged."""
    import gzip

    kept = REPO / "docs" / "learning" / "long" / "hold2b"
    log = tmp_path / "console.log"
    log.write_bytes(gzip.decompress((kept / "monitor_lines.log.gz").read_bytes()))
    assert monitor_from_log.main([str(log), str(tmp_path / "run"), "--year", "2026"]) == 0
    for role in ("explorer", "trainer"):
        original = read_points(kept / "run" / "monitor" / "tensorboard" / role)
        rebuilt = read_points(tmp_path / "run" / "monitor" / "tensorboard" / role)
        assert set(rebuilt) == set(original)
        for tag, points in original.items():
            assert [p.step for p in rebuilt[tag]] == [p.step for p in points], tag
            for old, new in zip(points, rebuilt[tag]):
                assert new.value == pytest.approx(old.value, rel=5e-6, nan_ok=True), (tag, old.step)
                assert abs(new.wall_time - old.wall_time) < 1, (tag, old.step)
