"""experiments/engine_ceiling.py: a kept run's requests and its explorer's time read back (any machine), and the
replay on vLLM (a CUDA GPU)."""

import json
import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, write_scalars
from experiments import engine_ceiling
from rftkit.reports.tensorboard import read_points

RUN = REPO / "docs/bots/pair2/random/checkpoints/AgentScope-MathBOTS/math-random"


def test_the_requests_of_a_window_are_the_experiences_the_pipeline_counted():
    shapes = engine_ceiling.requests(RUN, 40, 47)
    explorer = read_points(RUN / "monitor" / "tensorboard" / "explorer")
    counted = sum(p.value for p in explorer["experience_pipeline/experience_count"] if 40 <= p.step <= 47)
    assert len(shapes) == counted > 0
    assert all(prompt > 0 and reply >= 0 for prompt, reply in shapes)


def explorer_run(folder, evaluation=None):
    """An explorer's scalars as Trinity writes them: steps 1..8 collected at 10 s a step from t=1000, sync groups
    of 2, and an optional evaluation (step, start, end)."""
    series = {engine_ceiling.COLLECTED: [(step, 0.5, 1000.0 + 10 * step) for step in range(1, 9)],
              engine_ceiling.SYNC_GROUP: [(step, 20.0, 1000.0 + 10 * step) for step in (2, 4, 6, 8)]}
    if evaluation:
        step, start, end = evaluation
        series[engine_ceiling.EVAL] = [(step, end - start, end)]
    write_scalars(folder, "explorer", series)
    return folder


def test_the_explorers_time_runs_from_a_sync_groups_end(tmp_path):
    run = explorer_run(tmp_path / "run", evaluation=(2, 1005.0, 1025.0))
    assert engine_ceiling.explorer_seconds(run, 5, 8) == pytest.approx(40.0)  # from step 4's end to step 8's


@pytest.mark.parametrize("first,last,message", [
    (4, 6, "step 3 ends no sync group (the explorer's end at steps 2, 4, 6, 8)"),
    (3, 6, "the evaluation of step 2 ran in the window"),
    (1, 2, "the window needs the end of step 0 too"),
])
def test_windows_that_would_miscount_the_explorer_are_refused(tmp_path, first, last, message):
    run = explorer_run(tmp_path / "run", evaluation=(2, 1005.0, 1025.0))
    with pytest.raises(engine_ceiling.InputError, match=re.escape(message)):
        engine_ceiling.explorer_seconds(run, first, last)


def test_the_kept_run_has_no_window_free_of_evaluations():
    """It evaluated every 8 steps for about 65 s, through the next sync group: its rate cannot be read."""
    with pytest.raises(engine_ceiling.InputError, match="the evaluation of step 40 ran in the window"):
        engine_ceiling.explorer_seconds(RUN, 37, 40)


def test_the_table_gives_the_explorer_as_a_share_of_the_engines_rate():
    text = engine_ceiling.table({"steps": "2:3", "requests": 10, "prompt_tokens": 1000, "reply_tokens": 2000,
                                 "explorer_seconds": 4.0, "engine_seconds": 1.0})
    assert "| explorer | 4.0 | 500 | 2.5 |" in text and "| engine | 1.0 | 2,000 | 10.0 |" in text
    assert "the explorer at 25% of the engine's rate" in text


@pytest.mark.parametrize("args,message", [
    (["--steps", "1:3"], "--steps: expected A:B, whole numbers with 2 <= A <= B, got 1:3"),
    (["--steps", "500:501"], "--steps 500:501: the run kept no experience of those explore steps"),
    (["--steps", "41:44"], "--steps 41:44: the evaluation of step 40 ran in the window"),
])
def test_bad_windows_are_refused_with_one_line(tmp_path, args, message):
    (tmp_path / "config.json").write_text("{}")  # a model folder, as far as the checks look
    result = subprocess.run([sys.executable, "-m", "experiments.engine_ceiling", str(RUN), str(tmp_path), *args,
                             "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}"), result.stderr
    assert not (tmp_path / "out").exists()


def test_a_torn_experience_line_is_named(tmp_path):
    (tmp_path / "buffer").mkdir()
    (tmp_path / "buffer" / "experience_buffer.jsonl").write_text(
        json.dumps({"eid": {"batch": 2}, "prompt_length": 5, "response_length": 3}) + "\n{\"eid\": {\"bat\n")
    with pytest.raises(engine_ceiling.InputError, match="experience_buffer.jsonl, line 2: expected an experience"):
        engine_ceiling.requests(tmp_path, 2, 3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_vllm_makes_exactly_the_replies_asked_for(tmp_path):
    from runkit.tiny_model import build_random_model

    model = build_random_model(tmp_path / "model", "Qwen3-0.6B", layers=2, device="cuda")
    seconds = engine_ceiling.engine_seconds(model, [(30, 20), (100, 5), (7, 64)] * 4, 1.0, 0.3)
    assert 0 < seconds < 60
