"""Generate the FrozenLake train and test splits (parquet) for the tuner.

    python scripts/get_frozenlake_data.py --map_max_size 6 --train_size 10000 --test_size 100
"""

import sys

import pyarrow.parquet as pq

from frozenlake.data import DEFAULT_DIR, MAP_MAX_SIZE, MAX_MAP_SIZE, SEED, TEST_SIZE, TRAIN_SIZE, write_dataset
from frozenlake.env import ENV_MAX_STEPS
from rftkit.cli import ArgumentParser, at_least
from rftkit.files import check_writable
from rftkit.inputs import reports_input_errors


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    # upstream's flags are spelled with underscores; the hyphen spellings are the project's
    parser.add_argument("--map_max_size", "--map-max-size", type=int, default=MAP_MAX_SIZE,
                        help=f"largest map side, at most {MAX_MAP_SIZE}; sizes are 2..this, inclusive")
    parser.add_argument("--train_size", "--train-size", type=int, default=TRAIN_SIZE, help="maps in the train split")
    parser.add_argument("--test_size", "--test-size", type=int, default=TEST_SIZE, help="maps in the test split")
    parser.add_argument("--local_dir", "--local-dir", default=DEFAULT_DIR, help="output folder (default: %(default)s)")
    parser.add_argument("--seed", type=at_least(0), default=SEED, help="the same seed and flags give identical files")
    parser.add_argument("--env_max_steps", "--env-max-steps", type=int, default=ENV_MAX_STEPS,
                        help="keep maps solvable in this many moves (an episode allows 10)")
    args = parser.parse_args(argv)
    check_writable(args.local_dir, "--local_dir")  # before the maps, which take a while
    try:
        paths = write_dataset(args.local_dir, args.map_max_size, args.train_size, args.test_size,
                              args.env_max_steps, args.seed)
    except (ValueError, RuntimeError) as exc:  # a flag out of range, or flags that make solvable maps too rare
        parser.error(str(exc))
    for name, path in paths.items():
        print(f"{name}: {pq.read_metadata(path).num_rows} rows -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
