"""experiments/keep_learning.py: a FrozenLake learning run slimmed to what its reports read."""

import json

import pytest

from conftest import write_scalars
from experiments import keep_learning
from rftkit.inputs import read_json
from runkit.runs import launch_config


def learning_output(folder):
    """An experiments.frozenlake_learning output folder as a hold brings it back, with the parts keep leaves out."""
    for part in ("before", "after"):
        (folder / part).mkdir(parents=True)
        (folder / part / "report.json").write_text(json.dumps({"success_rate": 0.25}))
        (folder / part / "episodes.jsonl").write_text("".join(json.dumps({"task_number": i, "reward": 1.0}) + "\n"
                                                              for i in range(3)))
    (folder / "before_after.md").write_text("| model |\n")
    run = folder / "checkpoints" / "P" / "N"
    for sub in ("log", "buffer", "global_step_10/actor"):
        (run / sub).mkdir(parents=True)
    (run / "log" / "trainer.log").write_text("trainer\n")
    (run / "log" / "explorer.log").write_text("explorer\n")
    (run / "buffer" / "experience_buffer.jsonl").write_text("{}\n")
    (run / "global_step_10" / "actor" / "model.safetensors").write_text("weights")
    (run / "gpu_samples.csv").write_text("1.0,0,50,1000\n")
    write_scalars(run, "explorer", {"rollout/success/mean": [(1, 0.2, 100.0)]})
    (folder / "checkpoints" / "P-N.yaml").write_text("algorithm:\n  repeat_times: 16\n")
    return folder


def test_keep_takes_the_evaluations_gzipped_the_reports_and_the_runs_records(tmp_path):
    source = learning_output(tmp_path / "hold")
    assert keep_learning.main([str(source), str(tmp_path / "kept")]) == 0
    kept = tmp_path / "kept"
    for part in ("before", "after"):
        assert not (kept / part / "episodes.jsonl").exists()
        assert read_json(kept / part / "episodes.jsonl.gz", lines=True) == read_json(
            source / part / "episodes.jsonl", lines=True)
    assert (kept / "before_after.md").read_text() == "| model |\n"
    assert (kept / "run" / "log" / "trainer.log").is_file() and (kept / "run" / "gpu_samples.csv").is_file()
    assert any((kept / "run" / "monitor" / "tensorboard" / "explorer").iterdir())
    assert launch_config(kept / "run")["algorithm"]["repeat_times"] == 16  # where the reports look for it
    assert not (kept / "run" / "buffer").exists() and not (kept / "run" / "log" / "explorer.log").exists()
    assert not list(kept.rglob("global_step_*")) and not list(kept.rglob("*.safetensors"))


def test_keep_refuses_what_is_not_a_learning_output_and_an_existing_folder(tmp_path):
    source = learning_output(tmp_path / "hold")
    (tmp_path / "taken").mkdir()
    with pytest.raises(SystemExit, match="taken: exists; keep writes a new folder"):
        keep_learning.keep(source, tmp_path / "taken")
    with pytest.raises(SystemExit, match="expected an experiments.frozenlake_learning output folder") as raised:
        keep_learning.main([str(source / "after"), str(tmp_path / "other")])
    assert raised.value.code == 2  # a bad input, as every entry point answers one
    assert not (tmp_path / "other").exists() and not (tmp_path / "other.partial").exists()


def test_keep_links_a_before_already_kept_and_refuses_one_that_differs(tmp_path):
    source = learning_output(tmp_path / "hold")
    assert keep_learning.main([str(source), str(tmp_path / "learning" / "base")]) == 0
    base_before = tmp_path / "learning" / "base" / "before"
    kept = tmp_path / "learning" / "long" / "hold2"
    assert keep_learning.main([str(source), str(kept), "--before", str(base_before)]) == 0
    assert (kept / "before").is_symlink() and str((kept / "before").readlink()) == "../../base/before"
    assert (kept / "before" / "report.json").read_text() == (source / "before" / "report.json").read_text()

    (base_before / "report.json").write_text(json.dumps({"success_rate": 0.5}))
    with pytest.raises(SystemExit, match=r"--before .*base/before: expected the same files as the run's before/ "
                                         r"\(episodes.jsonl.gz, report.json\)"):
        keep_learning.keep(source, tmp_path / "learning" / "other", base_before)
    assert not (tmp_path / "learning" / "other").exists()


def test_what_a_hold_packs_to_bring_back_is_what_keep_reads_and_no_weights(tmp_path):
    import subprocess
    import tarfile

    from conftest import REPO

    hold = learning_output(tmp_path / "res" / "hold")
    (hold / "model").mkdir()
    (hold / "model" / "model.safetensors").write_text("converted weights")
    subprocess.run(["bash", str(REPO / "experiments" / "holds" / "bring_back.sh"), str(tmp_path / "hold.tgz"),
                    "hold"], cwd=tmp_path / "res", check=True, capture_output=True)
    with tarfile.open(tmp_path / "hold.tgz") as packed:
        names = packed.getnames()
        packed.extractall(tmp_path / "back", filter="data")
    assert not [name for name in names if "global_step" in name or "buffer" in name or name.endswith(".safetensors")]
    assert keep_learning.main([str(tmp_path / "back" / "hold"), str(tmp_path / "kept")]) == 0
    assert any((tmp_path / "kept" / "run" / "monitor" / "tensorboard" / "explorer").iterdir())
    assert (tmp_path / "kept" / "run" / "config.yaml").is_file()
    missing = subprocess.run(["bash", str(REPO / "experiments" / "holds" / "bring_back.sh"), str(tmp_path / "no.tgz"),
                              "hold", "gone"], cwd=tmp_path / "res", capture_output=True, text=True)
    assert missing.returncode == 2 and "FOLDER gone: no such folder" in missing.stderr
    assert not list(tmp_path.glob("no.tgz*"))
