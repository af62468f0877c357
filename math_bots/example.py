"""The math example as its main.py, scripts/evaluate.py, the experiments and the GPU smoke see it."""

from math_bots import data
from rftkit.example import Example

MATH = Example(
    name="math", title="math", main="math_bots/main.py",
    workflow_path="math_bots.workflow:run_react_agent", judge_path="math_bots.judge:gsm8k_judge",
    task_key_path="math_bots.data:question_key",
    task_columns=data.TASK_COLUMNS, task_ranges=data.TASK_RANGES,
    data={"train": data.DEFAULT_TRAIN_DIR, "eval": data.DEFAULT_AIME_DIR},
    data_flags={"train": "--train-dir", "eval": "--eval-dir"},
    data_remedy="run scripts/prepare_math_data.py first, or, offline, give {flags} math_bots/tasksets/gsm_symbolic "
                "(README.md, Math with BOTS)",
    configs={"random": "configs/config_random.yaml", "difficulty": "configs/config_difficulty.yaml"},
    default_selector="difficulty",
    tags=("rollout/accuracy/mean", "eval/aime24/accuracy/mean@1", "eval/aime24/format/mean@1"),
    report_module="math_bots.report", baselines=(),
    sample_writer="math_bots.data:write_sample",
    task_problem_path="math_bots.data:task_problem",
)
