"""The two runs: each selector's training, and the held-out evaluations before and after it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from experiments.bots_comparison.report import CONFIGS, DEFAULT_FEATURES, HELD_OUT_SET, held_out, markdown, report
from math_bots.example import MATH
from rftkit.cli import ArgumentParser, above, at_least
from rftkit.files import check_writable
from rftkit.inputs import reports_input_errors
from rftkit.inputs.model_path import check_model
from runkit.commands import evaluate_command, launch_command
from runkit.runs import last_checkpoint
from runkit.serving import engine_flags, model_folder, thinks, vllm_server
from runkit.steps import log, run_step
from runkit.training_flags import check_model_and_length, require_cuda

from rftkit.example import REPO  # the checkout's root

# The one-GPU variant of both configs (upstream's: 24,576-token context, 16,384-token replies, 8 GPUs).
ONE_GPU = {
    "model.max_model_len": 8192,
    "model.max_response_tokens": 1024,
    "trainer.max_token_len_per_gpu": 16384,
    "explorer.max_timeout": 600,
    # held-out evaluation: this script's steps 1 and 3, and Trinity's own every --eval-every steps
    "explorer.eval_on_startup": False,
    "explorer.eval_interval": 10 ** 6,
    "buffer.explorer_input.eval_tasksets": [],
    "data_processor.experience_pipeline.operators": [{"name": "pass_rate_calculator"}],
    # off: verl's fused log-prob kernel fails at the first trainer step with this model on an H100
    # (docs/results/2026-12-05-base-evaluations.md); the plain logits path fits the 16,384 tokens above
    "trainer.trainer_config.model.use_fused_kernels": False,
}


def train_command(selector: str, model: Path, data: Path, checkpoints: Path, args: argparse.Namespace) -> list[str]:
    settings = {**ONE_GPU, "buffer.explorer_input.taskset.path": str(data),
                "buffer.explorer_input.taskset.data_selector.seed": args.seed,
                "buffer.batch_size": args.batch, "algorithm.repeat_times": args.group,
                "algorithm.optimizer.lr": args.lr,
                "trainer.save_interval": args.save_every, "trainer.save_hf_checkpoint": "always",
                "trainer.max_checkpoints_to_keep": 2}
    if selector == "difficulty":
        settings["buffer.explorer_input.taskset.data_selector.feature_keys"] = args.features
    if not args.thinks:  # the configs name Qwen3's reasoning parser, which needs `</think>`
        settings["explorer.rollout_model.reasoning_parser"] = None
    if args.steps is not None:
        settings["buffer.total_steps"] = args.steps
    if args.eval_every:
        settings["explorer.eval_interval"] = args.eval_every
        settings["buffer.explorer_input.eval_tasksets"] = [{"name": HELD_OUT_SET, "path": str(data), "split": "test",
                                                            "repeat_times": args.eval_repeats}]
    return launch_command(MATH, config=CONFIGS[selector], model=model, checkpoints=checkpoints, settings=settings,
                          extra=args.set)


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    import experiments.bots_comparison as package

    parser = ArgumentParser(prog="python -m experiments.bots_comparison", description=package.__doc__)
    parser.add_argument("model", type=Path, nargs="?", help="HF model folder, or a .gguf file to convert")
    parser.add_argument("--selector", choices=list(CONFIGS),
                        help="which run this call makes (required unless --report-only)")
    parser.add_argument("--out", type=Path, required=True, help="both runs' folder")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "math_bots" / "gsm_symbolic",
                        help="train and test splits (default: %(default)s)")
    parser.add_argument("--features", nargs="+", default=DEFAULT_FEATURES,
                        help="pass-rate columns for BOTS, weakest first (default: %(default)s)")
    parser.add_argument("--minutes", type=above(0),
                        help="stop training after this much wall time (start-up included; default: no limit)")
    parser.add_argument("--steps", type=at_least(1), help="explore steps (default: as many as --minutes allows)")
    parser.add_argument("--save-every", type=at_least(1), default=5, help="trainer steps between checkpoints")
    parser.add_argument("--batch", type=at_least(1), default=16,
                        help="problems per step (default: %(default)s, upstream's)")
    parser.add_argument("--group", type=at_least(1), default=8,
                        help="rollouts per problem (default: %(default)s, upstream's)")
    parser.add_argument("--lr", type=above(0), default=1e-6, help="learning rate (default: %(default)s, upstream's)")
    parser.add_argument("--seed", type=int, default=42, help="the task selector's seed (default: %(default)s)")
    parser.add_argument("--repeats", type=at_least(1), default=4, help="evaluation episodes per test task")
    parser.add_argument("--eval-every", type=at_least(0), default=8, metavar="STEPS",
                        help="explore steps between in-run evaluations on the test split, a multiple of the "
                             "configs' sync interval, 4 (Trinity rounds it to one); 0: none (default: %(default)s)")
    parser.add_argument("--eval-repeats", type=at_least(1), default=1,
                        help="rollouts per test task in each in-run evaluation: each costs about the rollouts of "
                             "test tasks x this / (batch x group) steps (default: %(default)s)")
    parser.add_argument("--max-model-len", type=at_least(1), default=ONE_GPU["model.max_model_len"],
                        help="vLLM context for the evaluations (default: %(default)s)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to the launcher")
    parser.add_argument("--before-only", action="store_true",
                        help="only evaluate the starting model into <out>/before, which later runs in <out> reuse "
                             "(a hold of its own, so that each selector's hold is shorter)")
    parser.add_argument("--report-only", action="store_true", help="only redraw the comparison from <out>")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if args.report_only:
        if not any((out / name).is_dir() for name in ("before", *CONFIGS)):
            parser.error(f"--out {out}: no before/, {'/, '.join(CONFIGS)}/ folder to report on (--report-only reads "
                         f"the folders of earlier runs)")
        print(markdown(report(out, args.data.resolve(), args.features[-1])), flush=True)
        return 0
    if args.before_only:
        if args.model is None:
            parser.error("MODEL: required with --before-only")
        check_model(args.model, "model", gguf=True)
    else:
        if args.model is None or args.selector is None:
            parser.error("MODEL, --selector: required unless --report-only or --before-only")
        check_model_and_length(parser, args)
    data = args.data.resolve()
    for split in ("train", "test"):
        if not (data / f"{split}.parquet").is_file():
            parser.error(f"--data {data}: no {split}.parquet (scripts/prepare_math_data.py --source gsm-symbolic)")
    require_cuda("serving the model" if args.before_only else "serving and training the model")
    check_writable(out, "--out")
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    model = model_folder(args.model, out / "model")
    args.thinks = thinks(model)
    flags = engine_flags(MATH.config_path(args.selector), model, thinking=args.thinks)
    max_tokens = ONE_GPU["model.max_response_tokens"]
    if held_out(out / "before") is None:
        with vllm_server(model, model, out / "serve_before.log", args.max_model_len, flags) as url:
            run_step(evaluate_command(url, data, out / "before", args.repeats, max_tokens, task="math"),
                     out / "eval_before.log", check=True)
    if args.before_only:
        log(f"done in {time.time() - started:.0f} s: {out}/before")
        return 0
    run_dir = out / args.selector
    run_dir.mkdir(exist_ok=True)
    log(f"training with the {args.selector} selector")
    run_step(train_command(args.selector, model, data, run_dir / "checkpoints", args), run_dir / "train.log",
             timeout=None if args.minutes is None else args.minutes * 60, on_timeout="interrupt", check=True)
    trained = last_checkpoint(run_dir / "checkpoints")
    with vllm_server(trained, model, run_dir / "serve_after.log", args.max_model_len, flags) as url:
        run_step(evaluate_command(url, data, run_dir / "after", args.repeats, max_tokens, task="math"),
                 run_dir / "eval_after.log", check=True)
    print(markdown(report(out, data, args.features[-1])), flush=True)
    log(f"done in {time.time() - started:.0f} s: {out}/comparison.md, {out}/comparison.png")
    return 0

