"""How long the training entry points take to answer `--help` and to finish a `--dry-run`, beside the
imports a dry run cannot do without.

    python benchmarks/cli_start.py [--repeats 3]

Each command runs as a user runs it, a new `python` process from the repo's root, `--repeats` times;
the median is printed. The floor is a process that only imports what Trinity-RFT's config check and
agentscope's tuner need (torch, Trinity's validator and selectors, agentscope's tuner), with the
launcher's patches that keep those imports light: a dry run's time over it is what the launcher, the
workflow and the checks themselves cost. The math dry run uses the GSM-Symbolic tasksets that
ship in the repo, so it needs no prepared data.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from rftkit.cli import ArgumentParser, at_least
from rftkit.example import REPO

GSM = "math_bots/tasksets/gsm_symbolic"
# As the entry points run: without garbage collection while importing, and without the interpreter's teardown.
FLOOR = ("import gc, os; gc.disable(); from rftkit.trinity_config import patch_for_checks; patch_for_checks(); "
         "import torch, trinity.buffer.selector, trinity.common.config_validator, agentscope.tuner; os._exit(0)")
COMMANDS = {
    "frozenlake --help": ["frozenlake/main.py", "--help"],
    "math_bots --help": ["math_bots/main.py", "--help"],
    "frozenlake --dry-run": ["frozenlake/main.py", "--dry-run", "--gpus", "1"],
    "math_bots --dry-run": ["math_bots/main.py", "--config", "configs/config_difficulty.yaml", "--dry-run",
                            "--gpus", "1", "--train-dir", GSM, "--eval-dir", GSM,
                            "--set", "buffer.explorer_input.taskset.data_selector.feature_keys="
                                     "[smollm2_pass_rate,qwen_coder_0.5b_pass_rate]"],
    "floor (the imports a dry run needs)": ["-c", FLOOR],
}


def seconds(argv: list[str]) -> float:
    """Wall time of `python *argv` from the repo's root; a failed command stops the benchmark with its error."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"error: python {' '.join(argv)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python benchmarks/cli_start.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=at_least(1), default=3, help="runs of each command; the median is shown")
    args = parser.parse_args(argv)
    medians = {}
    for name, command in COMMANDS.items():
        medians[name] = statistics.median(seconds(command) for _ in range(args.repeats))
        print(f"{name:40s} {medians[name]:6.2f} s", flush=True)
    floor = medians["floor (the imports a dry run needs)"]
    for example in ("frozenlake", "math_bots"):
        print(f"{example} --dry-run / floor: {medians[f'{example} --dry-run'] / floor:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
