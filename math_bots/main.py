"""Train the math agent with multi-step GRPO through agentscope.tuner.tune(), with a chosen task selector.

    python math_bots/main.py --config configs/config_random.yaml       # baseline: uniform tasks
    python math_bots/main.py --config configs/config_difficulty.yaml   # BOTS: difficulty_based
    python math_bots/main.py --config configs/config_difficulty.yaml --dry-run

Data: run scripts/prepare_math_data.py first; the config names its outputs, --train-dir and --eval-dir
point elsewhere (upstream's config files need both).
"""

from math_bots.example import MATH
from rftkit.cli import ArgumentParser, exit_now
from rftkit.inputs import reports_input_errors
from rftkit.launch import add_arguments, launch


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    add_arguments(parser, default_config=str(MATH.config_path()))
    parser.add_argument("--train-dir", help="folder with the training split's train.parquet (default: the config's)")
    parser.add_argument("--eval-dir", help="folder with AIME-24's test.parquet (default: the config's)")
    args = parser.parse_args(argv)
    return launch(args, MATH.workflow_path, MATH.judge_path, data={"train": args.train_dir, "eval": args.eval_dir},
                  check_data=MATH.check_data)


if __name__ == "__main__":
    exit_now(main())
