"""Train the math agent with multi-step GRPO through agentscope.tuner.tune(), with a chosen task selector.

    python math_bots/main.py --config configs/config_random.yaml       # baseline: uniform tasks
    python math_bots/main.py --config configs/config_difficulty.yaml   # BOTS: difficulty_based
    python math_bots/main.py --config configs/config_difficulty.yaml --dry-run

Data: run scripts/prepare_math_data.py first; the config names its outputs.
"""

import argparse
import sys

from math_bots.example import MATH
from rftkit.cli import HelpFormatter
from rftkit.inputs import check_task_splits, reports_input_errors
from rftkit.launch import add_arguments, launch


def prepare(config: dict, dry_run: bool) -> None:
    """Refuse to launch without the splits the config names (a dry run: only those that exist), or with bad ones."""
    check_task_splits(config, MATH.task_columns, MATH.data_remedy, missing_ok=dry_run)


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_arguments(parser, default_config=str(MATH.config_path()))
    parser.add_argument("--train-dir", help="folder with the training split's train.parquet (default: the config's)")
    parser.add_argument("--eval-dir", help="folder with AIME-24's test.parquet (default: the config's)")
    args = parser.parse_args(argv)
    overrides = {"buffer.explorer_input.taskset.path": args.train_dir,
                 "buffer.explorer_input.eval_tasksets.0.path": args.eval_dir}
    return launch(args, MATH.workflow, MATH.judge, overrides=overrides, prepare=prepare)


if __name__ == "__main__":
    sys.exit(main())
