"""Generate the FrozenLake train and test splits (parquet) for the tuner.

    python scripts/get_frozenlake_data.py --map_max_size 6 --train_size 10000 --test_size 100

No test map has the layout of a training map, and no two test maps share one: the script prints, per split
and map size, the rows, the distinct layouts and the test's layouts also in training (0).
"""

import sys

import pyarrow.parquet as pq

from frozenlake.data import (DEFAULT_DIR, DEFAULT_MAP_MAX_SIZE, LARGEST_MAP_SIZE, NOTE_SHARE, SEED, TEST_SIZE,
                            TRAIN_SIZE, split_paths, split_summary, write_dataset)
from frozenlake.env import ENV_MAX_STEPS
from rftkit.cli import ArgumentParser, at_least
from rftkit.example import PATHS_RULE, in_checkout
from rftkit.files import check_file_targets, check_writable
from rftkit.inputs import ctrl_c_kept, reports_input_errors


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__, epilog=PATHS_RULE)
    # upstream's flags are spelled with underscores; the hyphen spellings are the project's
    parser.add_argument("--map_max_size", "--map-max-size", type=int, default=DEFAULT_MAP_MAX_SIZE,
                        help=f"largest map side, at most {LARGEST_MAP_SIZE}; sizes are 2..this, inclusive")
    parser.add_argument("--train_size", "--train-size", type=int, default=TRAIN_SIZE, help="maps in the train split")
    parser.add_argument("--test_size", "--test-size", type=int, default=TEST_SIZE, help="maps in the test split")
    parser.add_argument("--local_dir", "--local-dir", default=str(in_checkout(DEFAULT_DIR)),
                        help="output folder (default: %(default)s)")
    parser.add_argument("--seed", type=at_least(0), default=SEED, help="the same seed and flags give identical files")
    parser.add_argument("--env_max_steps", "--env-max-steps", type=int, default=ENV_MAX_STEPS,
                        help="keep maps solvable in this many moves (an episode allows 10)")
    args = parser.parse_args(argv)
    check_file_targets(*split_paths(args.local_dir).values())  # before the maps, which take a while
    check_writable(args.local_dir, "--local_dir")
    try:
        with ctrl_c_kept():  # the drawing is numpy's, whose errors can swallow a Ctrl-C
            paths = write_dataset(args.local_dir, args.map_max_size, args.train_size, args.test_size,
                                  args.env_max_steps, args.seed)
    except (ValueError, RuntimeError) as exc:  # a flag out of range, or flags that make solvable maps too rare
        parser.error(str(exc))
    rows = {name: pq.read_table(path).to_pylist() for name, path in paths.items()}
    for name, path in paths.items():
        print(f"{name}: {len(rows[name])} rows -> {path}")
    print_summary(split_summary(rows["train"], rows["test"]))
    return 0


def print_summary(summary: list[dict]) -> None:
    """The table of split_summary, and a note for each size whose few layouts the test split takes a share of."""
    print(f"{'split':<6} {'size':>4} {'rows':>6} {'layouts':>8} {'in train':>9}")
    for s in summary:
        in_train = "" if s["in_train"] is None else s["in_train"]
        print(f"{s['split']:<6} {s['size']:>4} {s['rows']:>6} {s['layouts']:>8} {in_train:>9}")
    for s in summary:
        if s["split"] == "test" and s["solvable"] and s["layouts"] >= NOTE_SHARE * s["solvable"]:
            print(f"note: size {s['size']} has only {s['solvable']} solvable layouts; the test split holds "
                  f"{s['layouts']} of them, so training sees only the other {s['solvable'] - s['layouts']}")


if __name__ == "__main__":
    sys.exit(main())
