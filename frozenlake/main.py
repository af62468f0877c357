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

import pyarrow.parquet as pq

from frozenlake.data import DEFAULT_DIR, write_dataset
from frozenlake.workflow import run_frozen_lake
from rftkit.launch import add_arguments, launch

REPO = Path(__file__).resolve().parent.parent


def prepare(config: dict) -> None:
    """Generate the training data if missing; refuse data without the columns the selector reads."""
    taskset = config["buffer"]["explorer_input"]["taskset"]
    train = Path(taskset["path"]) / "train.parquet"
    if not train.exists():
        print(f"no data in {taskset['path']}: generating it (scripts/get_frozenlake_data.py defaults)")
        write_dataset(taskset["path"])
    missing = set(taskset.get("data_selector", {}).get("feature_keys", [])) - set(pq.read_schema(train).names)
    if missing:
        raise SystemExit(f"error: {train} has no column {sorted(missing)} that the selector needs; "
                         f"regenerate it with scripts/get_frozenlake_data.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, default_config=str(REPO / "configs" / "frozenlake.yaml"))
    parser.add_argument("--data-dir", default=os.environ.get("FROZENLAKE_DATA_DIR", DEFAULT_DIR),
                        help="folder with train.parquet and test.parquet, generated with the data script's "
                             "defaults if missing (env FROZENLAKE_DATA_DIR; default: %(default)s)")
    args = parser.parse_args(argv)
    overrides = {"buffer.explorer_input.taskset.path": args.data_dir,
                 "buffer.explorer_input.eval_tasksets.0.path": args.data_dir}
    return launch(args, run_frozen_lake, overrides=overrides, prepare=prepare)


if __name__ == "__main__":
    sys.exit(main())
