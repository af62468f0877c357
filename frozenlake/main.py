"""Train the FrozenLake agent with multi-step GRPO through agentscope.tuner.tune().

    python frozenlake/main.py --dry-run      # validate and print the full config, on any machine
    python frozenlake/main.py                # train (needs CUDA GPUs)
    python frozenlake/main.py --config configs/frozenlake_difficulty.yaml   # with BOTS task selection

Hyper-parameters live in configs/frozenlake.yaml; flags override the paths.
"""

import argparse
import os
import sys
from pathlib import Path

from frozenlake.data import write_dataset
from frozenlake.example import FROZENLAKE
from rftkit.cli import HelpFormatter
from rftkit.files import check_writable
from rftkit.inputs import check_task_splits, reports_input_errors
from rftkit.launch import add_arguments, launch


def prepare(config: dict, dry_run: bool) -> None:
    """Refuse splits without the task columns (and the selector's features); a real run first generates missing data.

    A dry run checks only the splits that exist: it must work on a machine without data.
    """
    taskset = config["buffer"]["explorer_input"]["taskset"]
    if not dry_run and not (Path(taskset["path"]) / "train.parquet").exists():
        check_writable(taskset["path"], "--data-dir")
        print(f"no data in {taskset['path']}: generating it (scripts/get_frozenlake_data.py defaults)")
        write_dataset(taskset["path"])
    check_task_splits(config, FROZENLAKE.task_columns, FROZENLAKE.data_remedy, missing_ok=dry_run)


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_arguments(parser, default_config=str(FROZENLAKE.config_path()))
    parser.add_argument("--data-dir", default=os.environ.get("FROZENLAKE_DATA_DIR", FROZENLAKE.data["train"]),
                        help="folder with train.parquet and test.parquet, generated with the data script's "
                             "defaults if missing (env FROZENLAKE_DATA_DIR; default: %(default)s)")
    args = parser.parse_args(argv)
    overrides = {"buffer.explorer_input.taskset.path": args.data_dir,
                 "buffer.explorer_input.eval_tasksets.0.path": args.data_dir}
    return launch(args, FROZENLAKE.workflow, FROZENLAKE.judge, overrides=overrides, prepare=prepare)


if __name__ == "__main__":
    sys.exit(main())
