"""The FrozenLake example as its main.py, scripts/evaluate.py, the experiments and the GPU smoke see it."""

from frozenlake import data
from rftkit.example import Example

FROZENLAKE = Example(
    name="frozenlake", title="FrozenLake", main="frozenlake/main.py",
    workflow_path="frozenlake.workflow:run_frozen_lake", judge_path=None,
    task_key_path="frozenlake.data:layout",
    task_columns=data.TASK_COLUMNS, task_ranges=data.TASK_RANGES,
    data={"train": data.DEFAULT_DIR, "eval": data.DEFAULT_DIR},
    data_flags={"train": "--data-dir", "eval": "--data-dir"},
    data_remedy="regenerate it with scripts/get_frozenlake_data.py",
    configs={"random": "configs/frozenlake.yaml", "difficulty": "configs/frozenlake_difficulty.yaml"},
    default_selector="random",
    tags=("rollout/success/mean",),
    report_module="frozenlake.report", baselines=("oracle", "random"),
    sample_writer="frozenlake.data:write_sample",
    task_problem_path="frozenlake.data:task_problem",
)
