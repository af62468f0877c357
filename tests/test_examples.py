"""runkit.examples, the registry the entry points and the GPU scripts read: every shipped config is
listed, under the task selector its YAML uses, and each example's defaults name its own data."""

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from conftest import REPO
from runkit.examples import CONFIGS, EXAMPLES
from runkit.sample_data import make_data, sample_data


def test_every_shipped_config_is_listed_under_the_task_selector_it_uses():
    assert set(CONFIGS) == {path.name for path in (REPO / "configs").glob("*.yaml")}
    for name, (example, selector) in CONFIGS.items():
        taskset = yaml.safe_load(example.config_path(selector).read_text())["buffer"]["explorer_input"]["taskset"]
        used = taskset.get("data_selector", {}).get("selector_type", "random")  # Trinity's default: random
        assert used.startswith("difficulty_based") == (selector == "difficulty"), f"{name}: {used}"


def test_each_examples_default_data_is_where_its_configs_read_it():
    for example in EXAMPLES.values():
        for selector in example.configs:
            inputs = yaml.safe_load(example.config_path(selector).read_text())["buffer"]["explorer_input"]
            assert inputs["taskset"]["path"] == example.data["train"]
            assert inputs["eval_tasksets"][0]["path"] == example.data["eval"]


# A third example, made from docs/adding-an-example.md in a temporary folder: the agent says the task's word back.
ECHO = {
    "echo/__init__.py": '"""Say the task\'s word back: a tiny example made by tests/test_examples.py."""\n',
    "echo/data.py": '''
import pyarrow as pa
import pyarrow.parquet as pq

TASK_COLUMNS = {"word": "string"}
TASK_RANGES = {}
DEFAULT_DIR = "data/echo"


def word(row):
    return row["word"]


def write_sample(folders, tasks):
    folders["train"].mkdir(parents=True, exist_ok=True)
    for split, count in (("train", tasks), ("test", 2)):
        pq.write_table(pa.table({"word": [f"word{i}" for i in range(count)]}), folders["train"] / f"{split}.parquet")
''',
    "echo/workflow.py": '''
from agentscope.tuner import WorkflowOutput


async def run_echo(task, model, auxiliary_models=None) -> WorkflowOutput:
    response = await model([{"role": "user", "content": f"Repeat this word and nothing else: {task['word']}"}])
    text = "".join(block.get("text", "") for block in response.content if block.get("type") == "text")
    return WorkflowOutput(reward=float(text.strip() == task["word"]), response=text)
''',
    "echo/example.py": '''
from pathlib import Path

from echo import data
from rftkit.example import Example

ECHO = Example(
    name="echo", title="echo", main="echo/main.py", workflow_path="echo.workflow:run_echo", judge_path=None,
    task_key_path="echo.data:word",
    task_columns=data.TASK_COLUMNS, task_ranges=data.TASK_RANGES,
    data={"train": data.DEFAULT_DIR, "eval": data.DEFAULT_DIR},
    data_flags={"train": "--data-dir", "eval": "--data-dir"}, data_remedy="write the words first",
    configs={"random": str(Path(__file__).resolve().parent.parent / "configs" / "echo.yaml")},
    default_selector="random", tags=("rollout/accuracy/mean",), report_module="echo.report", baselines=(),
    sample_writer="echo.data:write_sample",
)
''',
    "echo/main.py": '''
import sys

from echo.example import ECHO
from rftkit.cli import ArgumentParser
from rftkit.inputs import reports_input_errors
from rftkit.launch import add_arguments, launch


@reports_input_errors
def main(argv=None):
    parser = ArgumentParser(description="Train the echo agent.")
    add_arguments(parser, default_config=str(ECHO.config_path()))
    parser.add_argument("--data-dir", default=ECHO.data["train"], help="folder with train and test splits")
    args = parser.parse_args(argv)
    return launch(args, ECHO.workflow_path, ECHO.judge_path, data={"train": args.data_dir, "eval": args.data_dir},
                  check_data=ECHO.check_data)


if __name__ == "__main__":
    sys.exit(main())
''',
}


def test_a_third_example_made_from_the_recipe_dry_runs_and_is_measured_like_the_others(tmp_path, monkeypatch):
    for name, text in ECHO.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    config = yaml.safe_load((REPO / "configs" / "frozenlake.yaml").read_text())
    inputs = config["buffer"]["explorer_input"]
    for taskset in [inputs["taskset"], *inputs["eval_tasksets"]]:
        taskset["path"] = "data/echo"
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "echo.yaml").write_text(yaml.safe_dump({**config, "project": "echo", "name": "echo"}))
    words = pa.table({"word": ["apple", "river", "stone", "cloud"]})
    (tmp_path / "data" / "echo").mkdir(parents=True)
    for split in ("train", "test"):
        pq.write_table(words, tmp_path / "data" / "echo" / f"{split}.parquet")
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout

    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}
    result = subprocess.run([sys.executable, "echo/main.py", "--dry-run", "--gpus", "1"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dry run: the config is valid" in result.stdout + result.stderr
    missing = subprocess.run([sys.executable, "echo/main.py", "--dry-run", "--data-dir", "data/ech"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "write the words first" in missing.stderr.strip().splitlines()[-1]

    # Registered (the one line in runkit/examples.py) and given its size (one in experiments/scales.py), the
    # trainer benchmark builds its batches.
    monkeypatch.syspath_prepend(str(tmp_path))
    from echo.example import ECHO as echo
    from experiments.scales import SCALES, Scale
    from experiments.trainer_speed.settings import lengths

    monkeypatch.setitem(EXAMPLES, "echo", echo)
    monkeypatch.setitem(SCALES, "echo", Scale(architecture="Qwen2.5-0.5B", response_tokens=8, full_run_steps=10,
                                              trainer_batch=4, prompt_tokens=(20, 30), reply_tokens=(1, 8),
                                              padded_budget=4096))
    batch = lengths("echo")
    assert len(batch) == 4 and all(20 <= prompt <= 30 and 1 <= reply <= 8 for prompt, reply in batch)
    make_data(tmp_path / "work", tasks=5)  # and the GPU smoke gets its small data
    assert pq.read_metadata(sample_data(echo, tmp_path / "work")["train"] / "train.parquet").num_rows == 5
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout == before
