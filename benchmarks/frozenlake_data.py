"""Time to generate the default FrozenLake dataset (10,000 train + 100 test solvable maps).

    python benchmarks/frozenlake_data.py
"""

import tempfile
import time

from frozenlake.data import write_dataset
from rftkit.cli import ArgumentParser, at_least


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=at_least(1), default=3, help="generations timed; the best and the median "
                                                                      "are printed")
    repeats = parser.parse_args(argv).repeats
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            write_dataset(out, map_max_size=6, train_size=10000, test_size=100, progress=False)
            times.append(time.perf_counter() - start)
    print(f"generate 10,000 + 100 maps (map_max_size 6, env_max_steps 8): "
          f"best {min(times):.2f} s, median {sorted(times)[len(times) // 2]:.2f} s over {repeats} runs")


if __name__ == "__main__":
    main()
