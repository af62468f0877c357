"""experiments/bots_comparison on CPU: both runs' launches pass Trinity's checker with the same
settings, and the report reads Trinity's scalars and the evaluations into the comparison (the training itself needs
GPUs)."""

import json
import subprocess
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.bots_comparison import report as bots_report
from experiments.bots_comparison import runs as comparison
from rftkit.inputs import read_json

from conftest import REPO, config_only_model, write_checkpoint, write_scalars


@pytest.fixture
def gsm_data(tmp_path):
    """GSM-Symbolic-shaped splits with two reference pass-rate columns (fixture rows, not generated)."""
    data = tmp_path / "gsm"
    data.mkdir()
    rows = {"question": [f"What is {i} + 1?" for i in range(8)], "answer": [f"#### {i + 1}" for i in range(8)],
            "template": [i % 4 for i in range(8)], "instance": [i // 4 for i in range(8)]}
    pq.write_table(pa.table({**rows, **{c: [0.25] * 8 for c in bots_report.DEFAULT_FEATURES}}), data / "train.parquet")
    pq.write_table(pa.table(rows), data / "test.parquet")
    return data


def args(**overrides):
    return SimpleNamespace(**{"seed": 42, "batch": 16, "group": 8, "lr": 1e-6, "save_every": 5, "steps": None,
                              "features": bots_report.DEFAULT_FEATURES, "set": [], "thinks": True, "eval_every": 8,
                              "eval_repeats": 2, **overrides})


def test_both_runs_share_every_setting_but_the_selector_and_its_features(tmp_path, gsm_data):
    commands = {s: comparison.train_command(s, tmp_path / "m", gsm_data, tmp_path / "c", args())
                for s in bots_report.CONFIGS}
    settings = {s: {flag for flag in command if flag.startswith("--set=")} for s, command in commands.items()}
    only_bots = settings["difficulty"] - settings["random"]
    assert only_bots == {"--set=buffer.explorer_input.taskset.data_selector.feature_keys="
                         + json.dumps(bots_report.DEFAULT_FEATURES)}
    assert settings["random"] <= settings["difficulty"]
    assert '--set=data_processor.experience_pipeline.operators=[{"name": "pass_rate_calculator"}]' in settings["random"]
    held_out = [{"name": bots_report.HELD_OUT_SET, "path": str(gsm_data), "split": "test", "repeat_times": 2}]
    assert {"--set=explorer.eval_interval=8",
            f"--set=buffer.explorer_input.eval_tasksets={json.dumps(held_out)}"} <= settings["random"]
    without = comparison.train_command("random", tmp_path / "m", gsm_data, tmp_path / "c", args(eval_every=0))
    assert "--set=buffer.explorer_input.eval_tasksets=[]" in without


def test_a_model_without_thinking_tokens_runs_without_the_reasoning_parser(tmp_path, gsm_data, smollm2_tokenizer):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from runkit.tiny_model import load_tokenizer

    plain = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1}, unk_token="<unk>"))  # like Qwen2.5's: no </think>
    PreTrainedTokenizerFast(tokenizer_object=plain, unk_token="<unk>").save_pretrained(tmp_path / "plain")
    load_tokenizer(smollm2_tokenizer).save_pretrained(tmp_path / "smoke")  # the smoke's, with Qwen3's thinking tokens
    assert comparison.thinks(tmp_path / "plain") is False and comparison.thinks(tmp_path / "smoke") is True
    command = comparison.train_command("random", tmp_path / "m", gsm_data, tmp_path / "c", args(thinks=False))
    assert "--set=explorer.rollout_model.reasoning_parser=null" in command
    assert not any("reasoning_parser" in flag for flag in
                   comparison.train_command("random", tmp_path / "m", gsm_data, tmp_path / "c", args()))


@pytest.mark.parametrize("selector,thinking", [("random", True), ("difficulty", True), ("difficulty", False)])
def test_each_run_passes_trinitys_checker_on_cpu(selector, thinking, tmp_path, gsm_data):
    model = config_only_model(tmp_path / "model")
    command = comparison.train_command(selector, model, gsm_data, tmp_path / "c", args(thinks=thinking))
    result = subprocess.run([*command, "--dry-run", "--gpus", "1"], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    selector_line = "difficulty_based_resumable" if selector == "difficulty" else "random"
    assert selector_line in result.stdout and "1 GPU(s)" in result.stdout
    assert f"eval taskset    {bots_report.HELD_OUT_SET}: {gsm_data} [test], 2 rollout(s) per task, every 8 steps" \
        in result.stdout


def evaluation(folder, per_task, format_rate=1.0):
    """An evaluate.py output folder (report.json, episodes.jsonl) with these per-task rewards."""
    folder.mkdir(parents=True)
    episodes = [{"task_number": t, "repeat": r, "reward": v} for t, rewards in enumerate(per_task)
                for r, v in enumerate(rewards)]
    accuracy = sum(e["reward"] for e in episodes) / len(episodes)
    (folder / "report.json").write_text(json.dumps({"accuracy": accuracy, "accuracy_ci95": [0.0, 1.0],
                                                    "episodes": len(episodes), "format_rate": format_rate}))
    (folder / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))


def test_the_report_compares_the_runs_from_trinitys_scalars_and_the_evaluations(tmp_path):
    out = tmp_path / "bots"
    evaluation(out / "before", [[0, 0], [0, 1], [1, 1], [0, 0]], format_rate=0.25)
    # random made a third step, which the time budget did not give BOTS: the ratio leaves it out
    for selector, effective, after in (("random", [0.2, 0.2, 0.8], [[0, 0], [0, 1], [1, 1], [0, 0]]),
                                       ("difficulty", [0.5, 0.5], [[1, 0], [1, 1], [1, 1], [0, 1]])):
        run = out / selector / "checkpoints" / "AgentScope-MathBOTS" / f"math-{selector}"
        (run / "log").mkdir(parents=True)
        write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.3), (2, 0.5), (3, 0.9)][:len(effective)],
                                        bots_report.EFFECTIVE: list(enumerate(effective, start=1)),
                                        bots_report.TOOL_CALLS: [(1, 1.0), (2, 2.0), (3, 2.0)][:len(effective)]})
        evaluation(out / selector / "after", after)
    result = bots_report.report(out)
    assert result["runs"]["random"][f"mean {bots_report.EFFECTIVE}"] == pytest.approx(0.4)
    assert result["shared steps"]["steps"] == 2
    assert result["shared steps"]["random"][bots_report.ACCURACY] == pytest.approx(0.4)
    assert result["effective-task ratio, BOTS / random"] == pytest.approx(2.5)
    bots = result["runs"]["difficulty"]
    assert bots["steps"] == 2 and bots[f"mean {bots_report.TOOL_CALLS}"] == pytest.approx(1.5)
    assert bots["after vs before"]["better"] == 3 and bots["after vs before"]["worse"] == 0
    assert result["runs"]["random"]["after vs before"] == {"better": 0, "worse": 0, "p": 1.0}
    assert result["BOTS after vs random after"]["better"] == 3
    text = (out / "comparison.md").read_text()
    assert "Effective-task ratio, BOTS over random: 2.50x (goal: 1.5x or more)." in text
    assert "Over the 2 steps both runs made: rollout accuracy 0.400 (BOTS) against 0.400 (random)" in text
    assert "| base model | | | | | 0.375 (0.000-1.000) | 0.250 | |" in text
    assert "| steps | random | difficulty |" in text and "| 1-3 | 0.567 / 0.400 | 0.400 / 0.500 |" in text
    assert ("Held-out accuracy after training: BOTS 0.750 (0.000-1.000) against random 0.375 (0.000-1.000); "
            "the 95% intervals are overlapping.") in text
    assert (out / "comparison.png").stat().st_size > 0

    # the steps whose saves the evaluations played, where the runs kept verl's pointer to them
    for selector, step in (("random", 3), ("difficulty", 2)):
        job = out / selector / "checkpoints" / "AgentScope-MathBOTS" / f"math-{selector}"
        (job / "latest_checkpointed_iteration.txt").write_text(str(step))
    bots_report.report(out)
    assert ("BOTS 0.750 (0.000-1.000) at step 2 against random 0.375 (0.000-1.000) at step 3; the 95% intervals "
            "are overlapping (the checkpoints' steps differ: this compares the runs' lengths as well as their "
            "selectors).") in (out / "comparison.md").read_text()


@pytest.mark.parametrize("random,bots,verdict", [((0.15, 0.21), (0.22, 0.28), "apart, BOTS above"),
                                                 ((0.22, 0.28), (0.15, 0.21), "apart, random above"),
                                                 ((0.15, 0.23), (0.22, 0.28), "overlapping")])
def test_the_held_out_intervals_are_called_apart_only_when_they_do_not_touch(random, bots, verdict):
    assert bots_report.intervals({"ci95": random}, {"ci95": bots}) == verdict


def test_time_to_baseline_is_where_bots_first_reaches_randoms_last_held_out_accuracy(tmp_path):
    out, launch = tmp_path / "bots", 1_000_000.0
    # (step, accuracy, minutes from the launch) of each run's in-run evaluations
    for selector, evaluations in (("random", [(10, 0.20, 5), (20, 0.25, 10), (30, 0.30, 15)]),
                                  ("difficulty", [(10, 0.22, 6), (20, 0.31, 12), (30, 0.35, 18)])):
        run = out / selector / "checkpoints" / "AgentScope-MathBOTS" / f"math-{selector}"
        (run / "log").mkdir(parents=True)
        (run / "startup.jsonl").write_text(json.dumps({"phase": "launch", "at": launch, "pid": 1}) + "\n")
        write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.1)],
                                        f"{bots_report.HELD_OUT}4": [(step, value, launch + 60 * minutes)
                                                                    for step, value, minutes in evaluations]})
    result = bots_report.report(out)
    ttb = result["time to baseline"]
    assert ttb["random's last"] == {"step": 30, "accuracy": pytest.approx(0.30), "minutes": pytest.approx(15)}
    assert ttb["BOTS reached it"]["step"] == 20
    assert ttb["ttb, steps"] == pytest.approx(20 / 30) and ttb["ttb, minutes"] == pytest.approx(12 / 15)
    assert ("Time to baseline: random's last held-out accuracy in the run, 0.300 at step 30 (15.0 min from the "
            "launch), BOTS reached at step 20 (12.0 min from the launch): 0.67 of the steps, 0.80 of the time."
            ) in (out / "comparison.md").read_text()
    never = bots_report.time_to_baseline([{"step": 30, "accuracy": 0.5, "minutes": None}],
                                        [{"step": 10, "accuracy": 0.4, "minutes": None}])
    assert never["BOTS reached it"] is None and "ttb, steps" not in never
    assert bots_report.time_to_baseline([], [{"step": 10, "accuracy": 0.4, "minutes": None}]) is None


def test_the_report_gives_the_bots_selectors_own_time_as_a_share_of_a_step(tmp_path):
    from rftkit.trinity_plugins.digest import COST

    out = tmp_path / "bots"
    for selector in ("random", "difficulty"):
        run = out / selector / "checkpoints" / "AgentScope-MathBOTS" / f"math-{selector}"
        (run / "log").mkdir(parents=True)
        write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.1, 1000.0), (5, 0.2, 1080.0)]})  # 20 s a step
    (out / "random" / "train.log").write_text("training\n")
    (out / "difficulty" / "train.log").write_text(
        f"(Explorer pid=7) {COST} 3.000 ms choosing and 1.000 ms taking the feedback of 16 tasks\n"
        f"(Explorer pid=7) {COST} 5.000 ms choosing and 1.000 ms taking the feedback of 16 tasks\n")
    result = bots_report.report(out)
    assert result["runs"]["random"]["selector cost"] is None
    assert result["runs"]["difficulty"]["selector cost"]["share of a step"] == pytest.approx(0.005 / 20)
    assert ("The difficulty selector's own time: 5.00 ms a step (choosing 4.00 ms, feedback 1.00 ms, over 2 "
            "steps), 0.025% of a step of 20.0 s (the BOTS paper: 0.2% or less).") in \
        (out / "comparison.md").read_text()


def test_a_report_with_one_run_so_far_draws_what_there_is(tmp_path):
    out = tmp_path / "bots"
    run = out / "random" / "checkpoints" / "P" / "N"
    (run / "log").mkdir(parents=True)
    write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.25)]})
    result = bots_report.report(out)
    assert list(result["runs"]) == ["random"] and "effective-task ratio, BOTS / random" not in result
    assert result["runs"]["random"][f"mean {bots_report.EFFECTIVE}"] is None
    assert "| random | 1 | 0.250 | - |" in (out / "comparison.md").read_text()


def test_the_report_sets_what_each_selector_picked_against_the_reference_rates_and_counts_its_groups(tmp_path):
    data = tmp_path / "gsm"
    data.mkdir()
    pq.write_table(pa.table({"qwen_coder_0.5b_pass_rate": [0.0, 0.0, 0.5, 0.25]}), data / "train.parquet")
    run = tmp_path / "bots" / "random" / "checkpoints" / "P" / "N"
    (run / "log").mkdir(parents=True)
    write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.25), (2, 0.25)]})
    (run / "buffer").mkdir()
    # (explore step, task row, rollout, reward); row 2's second rollout took two model calls, two experiences
    experiences = [(1, 0, 0, 0.0), (1, 0, 1, 0.0), (1, 2, 0, 0.0), (1, 2, 1, 1.0), (1, 2, 1, 1.0),
                   (2, 0, 0, 1.0), (2, 0, 1, 0.0), (2, 1, 0, 0.0), (2, 1, 1, 0.0), (2, 3, 0, 1.0), (2, 3, 1, 1.0)]
    (run / "buffer" / "experience_buffer.jsonl").write_text("".join(
        json.dumps({"eid": {"batch": step, "run": rollout}, "info": {"task_index": {"index": row}}, "reward": reward})
        + "\n" for step, row, rollout, reward in experiences))
    run = bots_report.report(tmp_path / "bots", data)["runs"]["random"]
    assert run["picks"] == {"picks": 5, "distinct": 4, "reference above 0": 0.4,
                            "effective, reference 0": pytest.approx(1 / 3), "effective, reference above 0": 0.5}
    assert run["outcomes"] == [{"first": 1, "all wrong": 0.4, "all right": 0.2}]
    text = (tmp_path / "bots" / "comparison.md").read_text()
    assert "| random | 5 | 4 | 0.400 | 0.333 | 0.500 |" in text and "| 1-2 | 0.400 / 0.200 |" in text
    assert bots_report.report(tmp_path / "bots")["runs"]["random"]["picks"] is None  # no split: no table
    assert "What each selector picked" not in (tmp_path / "bots" / "comparison.md").read_text()


def test_the_report_counts_the_templates_each_selector_drew_from(tmp_path):
    """Where the train split names each problem's template (GSM-Symbolic does), the picks' spread over them."""
    data = tmp_path / "gsm"
    data.mkdir()
    pq.write_table(pa.table({"qwen_coder_0.5b_pass_rate": [0.5] * 6, "template": [0, 0, 0, 1, 1, 2]}),
                   data / "train.parquet")
    run = tmp_path / "bots" / "difficulty" / "checkpoints" / "P" / "N"
    for folder in ("log", "buffer"):
        (run / folder).mkdir(parents=True)
    write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.5), (20, 0.5)]})
    # steps 1-10 pick rows 0, 1, 3, 5 (templates 0, 0, 1, 2); steps 11-20 rows 0, 1, 2 (all template 0)
    experiences = [(1, 0), (1, 1), (4, 3), (10, 5), (11, 0), (12, 1), (20, 2)]
    (run / "buffer" / "experience_buffer.jsonl").write_text("".join(
        json.dumps({"eid": {"batch": step, "run": rollout}, "info": {"task_index": {"index": row}},
                    "reward": float(rollout)}) + "\n" for step, row in experiences for rollout in (0, 1)))
    result = bots_report.report(tmp_path / "bots", data)["runs"]["difficulty"]
    assert result["picks"]["templates"] == 3 and result["picks"]["largest template share"] == pytest.approx(5 / 7)
    assert [w["largest template share"] for w in result["outcomes"]] == [0.5, 1.0]
    text = (tmp_path / "bots" / "comparison.md").read_text()
    assert "| difficulty | 7 | 5 | 1.000 | - | 1.000 | 3 | 0.714 |" in text
    assert "| 11-20 | 0.000 / 0.000 / 1.000 |" in text


def test_bad_flags_are_refused_before_anything_starts(tmp_path, gsm_data, capsys):
    model = config_only_model(tmp_path / "model")
    (tmp_path / "weights.bin").write_text("")
    for argv, message in [(["--out", str(tmp_path)],
                           "MODEL, --selector: required unless --report-only or --before-only"),
                          (["--out", str(tmp_path), "--before-only"], "MODEL: required with --before-only"),
                          ([str(model), "--selector", "random", "--out", str(tmp_path)],
                           "--steps, --minutes: give one, or both"),
                          ([str(tmp_path / "none"), "--selector", "random", "--steps", "1", "--out", str(tmp_path)],
                           "no such file or folder"),
                          ([str(gsm_data), "--selector", "random", "--steps", "1", "--out", str(tmp_path)],
                           "no config.json in this folder; expected an HF model folder or a GGUF file (.gguf)"),
                          ([str(tmp_path / "weights.bin"), "--selector", "random", "--steps", "1", "--out",
                            str(tmp_path)],
                           "expected an HF model folder or a GGUF file (.gguf)"),
                          ([str(model), "--selector", "random", "--steps", "1", "--out", str(tmp_path),
                            "--data", str(tmp_path)], "no train.parquet"),
                          ([str(model), "--selector", "random", "--steps", "0", "--out", str(tmp_path)],
                           "--steps: must be at least 1, got 0"),
                          ([str(model), "--selector", "random", "--minutes", "-1", "--out", str(tmp_path)],
                           "--minutes: must be more than 0, got -1"),
                          ([str(model), "--selector", "random", "--steps", "1", "--out", str(tmp_path),
                            "--eval-every", "-1"], "--eval-every: must be at least 0, got -1"),
                          ([str(model), "--selector", "random", "--steps", "1", "--out", str(tmp_path),
                            "--eval-repeats", "0"], "--eval-repeats: must be at least 1, got 0")]:
        with pytest.raises(SystemExit):
            comparison.main(argv)
        assert message in capsys.readouterr().err


def test_evaluations_of_different_tasks_are_not_paired():
    assert bots_report.paired({"per task": {0: 1.0}}, {"per task": {1: 0.0}}) == \
        {"error": "the two evaluations are of different tasks"}
    assert bots_report.paired({"per task": {0: 0.0, 1: 1.0}}, {"per task": {0: 0.5, 1: 1.0}}) == \
        {"better": 1, "worse": 0, "p": 1.0}


def test_the_whole_script_runs_both_selectors_with_a_fixture_server_and_recorded_runs(tmp_path, gsm_data,
                                                                                     monkeypatch, smollm2_tokenizer):
    """main() for each selector, from the model to the comparison, with the two GPU parts replaced by stand-ins:
    the fixture server for `vllm serve`, which refuses the agent's tool unless given a tool parser as vLLM
    does (the starting model is never right, a trained one right on even numbers), and for the launch, a run
    folder as Trinity leaves it, with its scalars."""
    import contextlib
    import re

    from rftkit.reports.evaluation import message_text
    from standins.fake_vllm_server import FakeVLLMServer
    from runkit.steps import Step
    from runkit.tiny_model import load_tokenizer

    model = tmp_path / "model"
    load_tokenizer(smollm2_tokenizer).save_pretrained(model)  # has </think>: the configs' reasoning parser stays
    config_only_model(model)
    served, launched = [], []

    @contextlib.contextmanager
    def fixture_server(weights, tokenizer, log_file, max_model_len, flags):
        served.append((weights, tuple(flags)))

        def reply(body):
            n = int(re.search(r"What is (\d+)", message_text(body["messages"][-1])).group(1))
            return f"\\boxed{{{n + 1}}}" if weights != model and n % 2 == 0 else "\\boxed{0}"

        with FakeVLLMServer(reply, tool_parser="--tool-call-parser" in flags) as server:
            yield server.url + "/v1"

    real_run = comparison.run_step

    def recorded_run(command, log_file, **kw):
        if command[1] != "math_bots/main.py":
            return real_run(command, log_file, **kw)
        launched.append(command)
        selector = log_file.parent.name
        run = log_file.parent / "checkpoints" / "AgentScope-MathBOTS" / f"math-{selector}"
        write_checkpoint(run / "global_step_2", hf_weights=True)
        (run / "log").mkdir()
        (run / "latest_checkpointed_iteration.txt").write_text("2")
        effective = 0.25 if selector == "random" else 0.5
        write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.1), (2, 0.2)],
                                        bots_report.EFFECTIVE: [(1, effective), (2, effective)],
                                        bots_report.TOOL_CALLS: [(1, 0.0), (2, 0.5)]})
        return Step(0, 1.0)

    monkeypatch.setattr(comparison, "vllm_server", fixture_server)
    monkeypatch.setattr(comparison, "run_step", recorded_run)
    monkeypatch.setattr(comparison, "require_cuda", lambda what: None)  # the fixtures stand in for the GPU
    monkeypatch.chdir(REPO)  # the evaluation runs scripts/evaluate.py by its path in the repo
    out = tmp_path / "bots"
    parsers = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "deepseek_r1")
    assert comparison.main([str(model), "--out", str(out), "--data", str(gsm_data), "--repeats", "1",
                            "--before-only"]) == 0  # the starting model's evaluation, in a hold of its own
    assert served == [(model, parsers)] and not launched and (out / "before" / "episodes.jsonl").is_file()
    for selector in ("random", "difficulty"):
        assert comparison.main([str(model), "--selector", selector, "--out", str(out), "--data", str(gsm_data),
                                "--steps", "2", "--repeats", "1"]) == 0
    trained = [out / s / "checkpoints" / "AgentScope-MathBOTS" / f"math-{s}" / "global_step_2" / "actor" /
               "huggingface" for s in ("random", "difficulty")]
    assert served == [(model, parsers), (trained[0], parsers), (trained[1], parsers)]  # before/ reused
    assert [c[c.index("--config") + 1] for c in launched] == ["configs/config_random.yaml",
                                                              "configs/config_difficulty.yaml"]
    result = json.loads((out / "comparison.json").read_text())
    assert result["held-out before"]["accuracy"] == 0.0
    assert result["runs"]["difficulty"]["held-out after"]["accuracy"] == 0.5
    assert result["effective-task ratio, BOTS / random"] == pytest.approx(2.0)


def test_report_only_refuses_a_folder_with_no_runs_and_names_a_file_cut_short(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        comparison.main(["--out", str(tmp_path / "empty"), "--report-only"])
    assert stop.value.code == 2
    assert "no before/, random/, difficulty/ folder to report on" in capsys.readouterr().err
    assert not (tmp_path / "empty").exists()
    before = tmp_path / "bots" / "before"
    before.mkdir(parents=True)
    (before / "report.json").write_text('{"accuracy": 0.5, "accur')  # as a copy stopped half-way leaves it
    with pytest.raises(SystemExit) as stop:
        comparison.main(["--out", str(tmp_path / "bots"), "--report-only"])
    assert stop.value.code == 2
    assert f"{before / 'report.json'}: not JSON at line 1" in capsys.readouterr().err
    (before / "report.json").write_text(json.dumps({"accuracy": 0.5, "accuracy_ci95": [0.1, 0.9], "episodes": 2,
                                                    "format_rate": 1.0}))
    (before / "episodes.jsonl").write_text('{"task_number": 0, "reward": 1.0}\n{"task_number": 1, "rew\n')
    with pytest.raises(SystemExit):
        comparison.main(["--out", str(tmp_path / "bots"), "--report-only"])
    assert f"{before / 'episodes.jsonl'}: line 2: not JSON" in capsys.readouterr().err
    assert not (tmp_path / "bots" / "comparison.md").exists()


def test_keep_slims_a_run_to_what_the_report_reads_and_the_report_stays_the_same(tmp_path):
    from experiments.bots_comparison import keep

    data = tmp_path / "gsm"
    data.mkdir()
    pq.write_table(pa.table({"qwen_coder_0.5b_pass_rate": [0.0, 0.5, 0.5], "template": [0, 0, 1]}),
                   data / "train.parquet")
    source = tmp_path / "hold"
    evaluation(source / "before", [[0, 0], [0, 1], [1, 1]])
    run = source / "difficulty" / "checkpoints" / "P" / "N"
    for folder in ("log", "buffer", "global_step_5/actor"):
        (run / folder).mkdir(parents=True)
    (run / "log" / "trainer.log").write_text("trainer\n")
    (run / "log" / "explorer_runner_0.log").write_text("runner\n")
    (run / "global_step_5" / "actor" / "model.pt").write_text("weights")
    (run.parent.parent / "P-N.yaml").write_text("algorithm:\n  repeat_times: 8\n")  # the launcher's config
    write_scalars(run, "explorer", {bots_report.ACCURACY: [(1, 0.5, 100.0), (2, 0.5, 110.0)]})
    (run / "buffer" / "experience_buffer.jsonl").write_text("".join(
        json.dumps({"eid": {"batch": step, "task": 0, "run": rollout, "suffix": "x"}, "response_text": "long " * 50,
                    "info": {"task_index": {"index": row}, "model_version": 0}, "reward": float(rollout),
                    "response_length": 7}) + "\n" for step, row in ((1, 0), (1, 2), (2, 1)) for rollout in (0, 1)))
    evaluation(source / "difficulty" / "after", [[1, 0], [1, 1], [1, 1]])
    cost = "difficulty_based_resumable: took 0.500 ms choosing and 0.100 ms taking the feedback of 16 tasks"
    (source / "difficulty" / "train.log").write_text(
        f'INFO: 1.2.3.4 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n{cost}\n' * 2)
    kept = tmp_path / "kept"
    (kept / "before").parent.mkdir()
    (kept / "before").symlink_to(source / "before")
    assert keep.main([str(source / "difficulty"), str(kept / "difficulty")]) == 0

    def figures(out):
        result = bots_report.report(out, data)
        return json.dumps(result["runs"], sort_keys=True), (out / "comparison.md").read_text()

    assert figures(kept) == figures(source)
    job = kept / "difficulty" / "checkpoints" / "P" / "N"
    assert not (job / "global_step_5").exists() and not (job / "log" / "explorer_runner_0.log").exists()
    assert (job / "log" / "trainer.log").is_file()
    assert (kept / "difficulty" / "checkpoints" / "P-N.yaml").read_text() == "algorithm:\n  repeat_times: 8\n"
    queue = job / "buffer" / "experience_buffer.jsonl"
    assert not queue.exists()
    slimmed = read_json(queue.with_name(queue.name + ".gz"), lines=True)
    assert len(slimmed) == 6 and all("response_text" not in experience for experience in slimmed)
    assert (kept / "difficulty" / "train.log").read_text() == f"{cost}\n" * 2
    episodes = kept / "difficulty" / "after"
    assert not (episodes / "episodes.jsonl").exists()
    assert read_json(episodes / "episodes.jsonl.gz", lines=True) == read_json(source / "difficulty" / "after" /
                                                                              "episodes.jsonl", lines=True)
    with pytest.raises(SystemExit, match="exists; keep writes a new folder"):
        keep.main([str(source / "difficulty"), str(kept / "difficulty")])
    with pytest.raises(SystemExit, match="no checkpoints/<project>/<name>/log folder"):
        keep.main([str(source / "before"), str(tmp_path / "other")])
    assert not (tmp_path / "other").exists() and not (tmp_path / "other.partial").exists()


def test_the_selector_cost_benchmark_times_both_selectors_over_the_shipped_split(capsys):
    from experiments import selector_cost

    assert selector_cost.main(["--steps", "3", "--tasks", "40", "--step-seconds", "10"]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1].strip("| ").split(" | ")
    assert row[0] == "40" and float(row[1]) > 0 and float(row[2]) > 0
    assert float(row[3]) == pytest.approx(float(row[2]) / float(row[1]), rel=0.06)
    assert float(row[5].rstrip("%")) == pytest.approx(float(row[2]) / 1000 / 10 * 100, abs=1e-4)  # printed rounded
