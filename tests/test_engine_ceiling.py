"""experiments/engine_ceiling.py: a kept run's requests and its explorer's time read back (any machine), and the
replay on vLLM (a CUDA GPU)."""

import json
import subprocess
import sys

import pytest
import torch

from conftest import REPO
from experiments import engine_ceiling
from rftkit.reports.tensorboard import read_points

RUN = REPO / "docs/bots/pair2/random/checkpoints/AgentScope-MathBOTS/math-random"


def test_the_requests_of_a_window_are_the_experiences_the_pipeline_counted():
    shapes = engine_ceiling.requests(RUN, 40, 47)
    explorer = read_points(RUN / "monitor" / "tensorboard" / "explorer")
    counted = sum(p.value for p in explorer["experience_pipeline/experience_count"] if 40 <= p.step <= 47)
    assert len(shapes) == counted > 0
    assert all(prompt > 0 and reply >= 0 for prompt, reply in shapes)


def test_the_explorers_time_is_its_window_less_the_evaluations_in_it():
    explorer = read_points(RUN / "monitor" / "tensorboard" / "explorer")
    ends = {p.step: p.wall_time for p in explorer[engine_ceiling.COLLECTED]}
    window = ends[47] - ends[39]
    seconds = engine_ceiling.explorer_seconds(RUN, 40, 47)
    evaluations = [p.value for p in explorer["time/eval"] if ends[39] < p.wall_time <= ends[47]]
    assert evaluations and seconds == pytest.approx(window - sum(evaluations))


def test_the_table_gives_the_explorer_as_a_share_of_the_engines_rate():
    text = engine_ceiling.table({"steps": "2:3", "requests": 10, "prompt_tokens": 1000, "reply_tokens": 2000,
                                 "explorer_seconds": 4.0, "engine_seconds": 1.0})
    assert "| explorer | 4.0 | 500 | 2.5 |" in text and "| engine | 1.0 | 2,000 | 10.0 |" in text
    assert "the explorer at 25% of the engine's rate" in text


@pytest.mark.parametrize("args,message", [
    (["--steps", "1:3"], "--steps 1:3: expected A:B, whole numbers with 2 <= A <= B"),
    (["--steps", "500:501"], "--steps 500:501: the run kept no experience of those explore steps"),
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
