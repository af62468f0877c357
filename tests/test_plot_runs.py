"""scripts/plot_runs.py on tensorboard event files written here, laid out as Trinity writes them."""

import importlib.util

import pytest

from conftest import REPO, write_scalars

spec = importlib.util.spec_from_file_location("plot_runs", REPO / "scripts" / "plot_runs.py")
plot_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_runs)


def write_run(folder, rollout, evals):
    write_scalars(folder, "explorer", {"rollout/accuracy/mean": list(enumerate(rollout, start=1)),
                                       "eval/aime24/accuracy/mean@1": list(evals.items())})
    write_scalars(folder, "trainer", {"actor/pg_loss": [(1, 0.1)]})


def test_plots_runs_side_by_side_with_final_lowest_and_highest(tmp_path, capsys):
    write_run(tmp_path / "random", [0.10, 0.15, 0.12], {0: 0.05, 2: 0.07})
    write_run(tmp_path / "bots", [0.40, 0.55, 0.50], {0: 0.05, 2: 0.10})
    out = tmp_path / "plots" / "compare.png"
    assert plot_runs.main([f"random={tmp_path / 'random'}", str(tmp_path / "bots"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = out.with_suffix(".md").read_text()
    assert table == capsys.readouterr().out.split("\nwrote")[0]
    assert "| rollout/accuracy/mean | random | 0.1200 (3) | 0.1000 (1) | 0.1500 (2) |" in table
    assert "| rollout/accuracy/mean | bots | 0.5000 (3) | 0.4000 (1) | 0.5500 (2) |" in table
    assert "| eval/aime24/accuracy/mean@1 | bots | 0.1000 (2) | 0.0500 (0) | 0.1000 (2) |" in table


def test_the_table_averages_the_first_and_last_steps(tmp_path):
    write_run(tmp_path / "run", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], {})
    out = tmp_path / "run.png"
    assert plot_runs.main([f"long={tmp_path / 'run'}", "--scalars", "rollout/accuracy/mean", "--out", str(out)]) == 0
    assert "| long | 0.6000 (6) | 0.1000 (1) | 0.6000 (6) | 0.2500 | 0.4500 |" in out.with_suffix(".md").read_text()


def test_paired_runs_are_compared_step_by_step_over_the_steps_both_logged(tmp_path, capsys):
    write_run(tmp_path / "a", [0.1, 0.2, 0.3, 0.4], {})
    write_run(tmp_path / "b", [0.2, 0.1, 0.5], {})
    out = tmp_path / "pair.png"
    assert plot_runs.main([f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}", "--scalars", "rollout/accuracy/mean",
                           "--paired", "--out", str(out)]) == 0
    assert "| rollout/accuracy/mean | 3 | 0.2000 | 0.2667 | 2 / 1 | 1 |" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):
        plot_runs.main([f"a={tmp_path / 'a'}", "--paired", "--out", str(tmp_path / "one.png")])
    assert "--paired compares two runs; got 1" in capsys.readouterr().err


def test_reads_every_event_file_below_a_run(tmp_path):
    write_run(tmp_path / "run", [0.2, 0.3], {})
    series = plot_runs.read_scalars(tmp_path / "run")
    assert series["rollout/accuracy/mean"] == [(1, pytest.approx(0.2)), (2, pytest.approx(0.3))]
    assert "actor/pg_loss" in series  # from the trainer's file


def test_unknown_scalars_and_empty_folders_are_refused(tmp_path, capsys):
    write_run(tmp_path / "run", [0.2], {})
    with pytest.raises(SystemExit):
        plot_runs.main([str(tmp_path / "run"), "--scalars", "no/such/tag", "--out", str(tmp_path / "x.png")])
    assert "rollout/accuracy/mean" in capsys.readouterr().err  # lists what is there
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        plot_runs.main([str(tmp_path / "empty"), "--out", str(tmp_path / "x.png")])
    assert "no tensorboard event files" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_chained_parts_count_their_steps_on_from_the_part_before(tmp_path, capsys):
    write_run(tmp_path / "hold1", [0.10, 0.15, 0.20], {})
    write_run(tmp_path / "hold2", [0.22, 0.25], {})  # a second machine's run, its steps from 1 again
    out = tmp_path / "chain.png"
    assert plot_runs.main([f"hold 1={tmp_path / 'hold1'}", f"hold 2={tmp_path / 'hold2'}", "--chain",
                           "--scalars", "rollout/accuracy/mean", "--out", str(out)]) == 0
    table = out.with_suffix(".md").read_text()
    assert "| rollout/accuracy/mean | hold 2 | 0.2500 (5) | 0.2200 (4) | 0.2500 (5) |" in table
    assert "| rollout/accuracy/mean | hold 1 | 0.2000 (3) |" in table
    moved, starts = plot_runs.chained({"a": {"x": [(1, 0.0), (3, 1.0)]}, "b": {"x": [(1, 2.0)]}})
    assert moved["b"]["x"] == [(4, 2.0)] and starts == {"x": [3]}
    # the explorer's tags count explore steps, the trainer's updates: each goes on from its own last step
    moved, starts = plot_runs.chained({"a": {"explore": [(1, 0.0), (16, 0.1)], "update": [(1, 0.0), (32, 0.2)]},
                                       "b": {"explore": [(1, 0.3)], "update": [(1, 0.4), (2, 0.5)]}})
    assert moved["b"]["explore"] == [(17, 0.3)] and moved["b"]["update"] == [(33, 0.4), (34, 0.5)]
    assert starts == {"explore": [16], "update": [32]}


def test_the_legend_names_the_runs_and_not_the_dashed_starts(tmp_path, monkeypatch):
    import rftkit.reports.plots as plots

    drawn = []
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.append(fig))
    moved, starts = plot_runs.chained({"hold 1": {"x": [(1, 0.0), (3, 1.0)]}, "hold 2": {"x": [(1, 2.0)]}})
    plot_runs.draw(moved, ["x"], tmp_path / "x.png", starts)
    assert [text.get_text() for text in drawn[0].legends[0].get_texts()] == ["hold 1", "hold 2"]
