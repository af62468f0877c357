"""Train the FrozenLake agent with multi-step GRPO through agentscope.tuner.tune().

    python scripts/get_frozenlake_data.py    # the maps, in data/frozenlake
    python frozenlake/main.py --dry-run      # validate and print the full config, on any machine
    python frozenlake/main.py                # train (needs CUDA GPUs)
    python frozenlake/main.py --config configs/frozenlake_difficulty.yaml   # with BOTS task selection

Hyper-parameters live in configs/frozenlake.yaml (upstream's values); flags override the paths.
A config without tasksets (upstream's own config.yaml) gets a training taskset from --data-dir.
"""

import os
from dataclasses import replace

from frozenlake.example import FROZENLAKE
from rftkit.cli import ArgumentParser, exit_now
from rftkit.example import in_checkout
from rftkit.inputs import reports_input_errors
from rftkit.launch import add_arguments, launch


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    add_arguments(parser, default_config=str(FROZENLAKE.config_path()))
    parser.add_argument("--data-dir", help="folder with train.parquet and test.parquet, from "
                                           "scripts/get_frozenlake_data.py (default: env FROZENLAKE_DATA_DIR, "
                                           f"else {in_checkout(FROZENLAKE.data['train'])})")
    args = parser.parse_args(argv)
    example, from_env = FROZENLAKE, os.environ.get("FROZENLAKE_DATA_DIR")
    if args.data_dir is None:
        args.data_dir = from_env or str(in_checkout(FROZENLAKE.data["train"]))
        if from_env:  # a missing folder is then blamed on the variable that named it
            example = replace(FROZENLAKE, data_flags=dict.fromkeys(FROZENLAKE.data_flags, "FROZENLAKE_DATA_DIR"))
    return launch(args, example.workflow_path, example.judge_path,
                  data={"train": args.data_dir, "eval": args.data_dir}, check_data=example.check_data)


if __name__ == "__main__":
    exit_now(main())
