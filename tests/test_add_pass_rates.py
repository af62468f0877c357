"""scripts/add_pass_rates.py: reference pass rates measured by scripts/evaluate.py, written as BOTS feature columns."""

import importlib.util
import itertools
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rftkit.reports.evaluation import message_text
from standins.fake_vllm_server import FakeVLLMServer

from conftest import REPO, config_only_model


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


evaluate, add_pass_rates = load_script("evaluate"), load_script("add_pass_rates")
QUESTIONS = ["What is 2+2?", "What is 3+3?", "What is 5+5?"]


@pytest.fixture
def split(tmp_path):
    data = tmp_path / "gsm"
    data.mkdir()
    pq.write_table(pa.table({"question": QUESTIONS, "answer": ["#### 4", "#### 6", "#### 10"]}), data / "train.parquet")
    return data


def evaluate_split(split, out, repeats=4, limit=None):
    """The real evaluate.py against a fixture endpoint (a stand-in for a served reference model): always right
    on 2+2, right every other time on 3+3, never on 5+5."""
    calls = itertools.count()
    answers = {QUESTIONS[0]: lambda: "\\boxed{4}",
               QUESTIONS[1]: lambda: "\\boxed{6}" if next(calls) % 2 else "\\boxed{7}",
               QUESTIONS[2]: lambda: "\\boxed{11}"}
    with FakeVLLMServer(lambda body: answers[message_text(body["messages"][-1])]()) as server:
        flags = ["--task", "math", "--data", str(split), "--split", "train", "--model", "openai", "--base-url",
                 server.url + "/v1", "--model-name", "fixture", "--repeats", str(repeats), "--concurrency", "1",
                 "--out", str(out)] + (["--limit", str(limit)] if limit else [])
        assert evaluate.main(flags) == 0
    return out / "episodes.jsonl"


def test_each_task_gets_the_mean_reward_of_its_episodes(split, tmp_path, capsys):
    episodes = evaluate_split(split, tmp_path / "eval")
    flags = ["--data", str(split), "--episodes", str(episodes), "--column", "fixture_pass_rate"]
    assert add_pass_rates.main(flags) == 0
    table = pq.read_table(split / "train.parquet")
    assert table.column("fixture_pass_rate").to_pylist() == [1.0, 0.5, 0.0]
    assert table.column("answer").to_pylist() == ["#### 4", "#### 6", "#### 10"]  # the rest kept
    out = capsys.readouterr().out
    assert "fixture_pass_rate: 3 tasks, mean 0.500; 1 at 0, 1 at 1" in out and "4 episodes a task" in out
    assert (tmp_path / "gsm_fixture_pass_rate.png").stat().st_size > 0
    # a second measurement replaces the column instead of adding another
    assert add_pass_rates.main(flags) == 0
    assert pq.read_table(split / "train.parquet").column_names == ["question", "answer", "fixture_pass_rate"]


def test_episodes_of_part_of_the_split_or_of_another_split_are_refused(split, tmp_path, capsys):
    before = (split / "train.parquet").read_bytes()
    partial = evaluate_split(split, tmp_path / "partial", repeats=1, limit=2)
    with pytest.raises(SystemExit):
        add_pass_rates.main(["--data", str(split), "--episodes", str(partial), "--column", "x"])
    assert "no episode of row 2 (1 of 3 rows have none; evaluate the whole split, without --limit)" in \
        capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    episodes = [json.loads(line) for line in partial.read_text().splitlines()]
    episodes[1]["task"]["question"] = "What is 9+9?"
    other.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    with pytest.raises(SystemExit):
        add_pass_rates.main(["--data", str(split), "--episodes", str(other), "--column", "x"])
    assert "line 2: task 1's question is not row 1's of the split" in capsys.readouterr().err
    other.write_text(partial.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(SystemExit):
        add_pass_rates.main(["--data", str(split), "--episodes", str(other), "--column", "x"])
    assert f"--episodes {other}: line 2: not JSON" in capsys.readouterr().err
    assert (split / "train.parquet").read_bytes() == before  # nothing half-written


def test_a_column_of_the_task_itself_bad_rewards_and_bad_records_are_refused(split, tmp_path, capsys):
    before = (split / "train.parquet").read_bytes()
    good = evaluate_split(split, tmp_path / "eval", repeats=1)
    lines = good.read_text().splitlines()
    episodes = tmp_path / "bad.jsonl"
    for column, records, message in [
            ("question", lines, "--column question: " + str(split / "train.parquet") + " has this column already, "
                                "of string values, not pass rates; name another"),
            ("a/b", lines, "--column 'a/b': expected a name of letters, digits"),
            ("x", [lines[0].replace('"reward": 1.0', '"reward": 5.0'), *lines[1:]], "line 1: reward 5.0, expected "
                                                                                  "a number from 0 to 1"),
            ("x", [lines[0], "[1, 2]", *lines[2:]], "line 2: expected an episode of scripts/evaluate.py")]:
        episodes.write_text("\n".join(records) + "\n")
        with pytest.raises(SystemExit):
            add_pass_rates.main(["--data", str(split), "--episodes", str(episodes), "--column", column])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):  # evaluate.py's --out, given for its episodes.jsonl
        add_pass_rates.main(["--data", str(split), "--episodes", str(tmp_path / "eval"), "--column", "x"])
    assert f"--episodes {tmp_path / 'eval'}: a folder, expected evaluate.py's episodes.jsonl" in capsys.readouterr().err
    assert (split / "train.parquet").read_bytes() == before


def test_the_gpu_script_refuses_bad_models_and_a_missing_split_before_starting_anything(split, tmp_path, capsys):
    import experiments.math_pass_rates as script

    model = config_only_model(tmp_path / "model")
    for argv, message in [(["smollm2", "--out", str(tmp_path)], "'smollm2': expected NAME=MODEL"),
                          ([f"a b={split}", "--out", str(tmp_path)], "expected NAME=MODEL"),
                          (["smollm2=/no/such.gguf", "--out", str(tmp_path)], "no such file or folder: /no/such.gguf"),
                          ([f"smollm2={split}", "--out", str(tmp_path)], "no config.json in this folder"),
                          ([f"smollm2={model}", "--data", str(split), "--split", "test", "--out", str(tmp_path)],
                           "no test.parquet")]:
        with pytest.raises(SystemExit):
            script.main(argv)
        assert message in capsys.readouterr().err


def test_the_gpu_script_writes_one_column_per_model_through_a_server_that_acts_on_its_flags(split, tmp_path,
                                                                                            monkeypatch,
                                                                                            smollm2_tokenizer):
    """experiments/math_pass_rates.py from models to columns, with `vllm serve` replaced by the fixture server,
    which refuses the agent's tool unless it was given a tool parser, as vLLM does: a weak model never right,
    a stronger one always right on 2+2."""
    import contextlib

    import experiments.math_pass_rates as script
    from runkit.tiny_model import load_tokenizer

    models = {}
    for name in ("weak", "strong"):
        models[name] = config_only_model(tmp_path / name)
        load_tokenizer(smollm2_tokenizer).save_pretrained(models[name])  # has </think>: the reasoning parser applies
    served = []

    @contextlib.contextmanager
    def fixture_server(weights, tokenizer, log_file, max_model_len, flags):
        served.append((weights.name, tuple(flags)))
        right = weights.name == "strong"

        def reply(body):
            return "\\boxed{4}" if right and "2+2" in message_text(body["messages"][-1]) else "\\boxed{0}"

        with FakeVLLMServer(reply, tool_parser="--tool-call-parser" in flags) as server:
            yield server.url + "/v1"

    monkeypatch.setattr(script, "vllm_server", fixture_server)
    monkeypatch.setattr(script, "require_cuda", lambda what: None)  # the fixtures stand in for the GPU
    monkeypatch.chdir(REPO)  # the script's steps run the repo's scripts by relative path
    assert script.main([f"smollm2={models['weak']}", f"qwen={models['strong']}", "--data", str(split),
                        "--out", str(tmp_path / "out"), "--repeats", "2"]) == 0
    parsers = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "deepseek_r1")
    assert served == [("weak", parsers), ("strong", parsers)]
    table = pq.read_table(split / "train.parquet").to_pydict()
    assert table["smollm2_pass_rate"] == [0.0, 0.0, 0.0]
    assert table["qwen_pass_rate"] == [1.0, 0.0, 0.0]
