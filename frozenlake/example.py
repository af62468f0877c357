"""The FrozenLake example as its main.py, scripts/evaluate.py, the experiments and the GPU smoke see it."""

from frozenlake import data
from rftkit.example import Example, Scale

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
    # Qwen2.5-3B, upstream's model; a prompt of 280 to 480 tokens (the map, the rules, the moves so far)
    # and one move a reply; 700 explore steps, upstream's curve
    scale=Scale(architecture="Qwen2.5-3B", response_tokens=256, full_run_steps=700, trainer_batch=64,
                prompt_tokens=(280, 480), reply_tokens=(16, 256), padded_budget=4096),
    sample_writer="frozenlake.data:write_sample",
)
