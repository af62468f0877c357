"""Reference pass rates for the math training split, measured the BOTS way, on GPUs.

    python -m experiments.math_pass_rates --data data/math_bots/gsm_symbolic --out outputs/pass-rates \\
        --repeats 4 \\
        smollm2=path/to/SmolLM2-135M-Instruct.gguf qwen_coder_0.5b=path/to/qwen2.5-coder-0.5b.gguf

BOTS starts each task's difficulty estimate from the pass rates of reference models of different
strength (guru-RL-92k ships Qwen2.5-7B's and Qwen3-30B's). Upstream's advice for another task set
is to measure them by running several models over it. For each NAME=MODEL, weakest first, this:

1. serves MODEL with vLLM (a GGUF becomes an HF folder in <out>/NAME-model first);
2. plays every task of the split `--repeats` times with the project's own agent and judge
   (`scripts/evaluate.py --task math`, into <out>/NAME);
3. writes the mean reward per task into the split as `NAME_pass_rate` (`scripts/add_pass_rates.py`,
   which prints a histogram and draws <data>_NAME_pass_rate.png).

The configs' `feature_keys` then name those columns, weakest first. A step that fails stops the
script with its log's last lines.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from math_bots.example import MATH
from rftkit.cli import ArgumentParser, at_least
from rftkit.files import check_writable
from rftkit.inputs import reports_input_errors
from rftkit.inputs.model_path import check_model
from runkit.commands import evaluate_command
from runkit.serving import engine_flags, model_folder, vllm_server
from runkit.steps import log, run_step
from runkit.training_flags import require_cuda

from rftkit.example import REPO  # the checkout's root


def model_pairs(values: list[str], parser: argparse.ArgumentParser) -> list[tuple[str, Path]]:
    pairs = []
    for value in values:
        name, _, path = value.partition("=")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path:
            parser.error(f"{value!r}: expected NAME=MODEL, NAME a column-name prefix such as qwen_coder_0.5b")
        check_model(Path(path), repr(value), gguf=True)
        pairs.append((name, Path(path).resolve()))
    return pairs


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.math_pass_rates", description=__doc__)
    parser.add_argument("models", nargs="+", metavar="NAME=MODEL", help="HF model folder or .gguf file, weakest first")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "math_bots" / "gsm_symbolic",
                        help="folder with the split (default: %(default)s)")
    parser.add_argument("--split", default="train", help="split to measure (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True, help="evaluations and logs")
    parser.add_argument("--repeats", type=at_least(1), default=4,
                        help="episodes per task and model (default: %(default)s)")
    parser.add_argument("--max-tokens", type=at_least(1), default=1024,
                        help="tokens per model reply (default: %(default)s)")
    parser.add_argument("--max-model-len", type=at_least(1), default=8192, help="vLLM context (default: %(default)s)")
    args = parser.parse_args(argv)
    pairs = model_pairs(args.models, parser)
    if not (args.data / f"{args.split}.parquet").is_file():
        parser.error(f"--data {args.data}: no {args.split}.parquet "
                     f"(scripts/prepare_math_data.py --source gsm-symbolic)")
    require_cuda("serving the models")
    out = args.out.resolve()
    check_writable(out, "--out")
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    for name, given in pairs:
        model = model_folder(given, out / f"{name}-model")
        with vllm_server(model, model, out / f"serve_{name}.log", args.max_model_len,
                         engine_flags(MATH.config_path(), model)) as url:
            log(f"{name}: {args.repeats} episodes of every {args.split} task (served at {url})")
            run_step(evaluate_command(url, data, out / name, args.repeats, args.max_tokens, task="math",
                                      split=args.split), out / f"eval_{name}.log", check=True)
        run_step([sys.executable, "scripts/add_pass_rates.py", "--data", str(data), "--split", args.split,
                  "--episodes", str(out / name / "episodes.jsonl"), "--column", f"{name}_pass_rate"],
                 out / f"pass_rate_{name}.log", check=True)
        print((out / f"pass_rate_{name}.log").read_text(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
