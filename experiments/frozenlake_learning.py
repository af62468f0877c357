"""FrozenLake with a real model on GPUs: evaluate it, train it, evaluate the result, draw both.

    python -m experiments.frozenlake_learning MODEL --out outputs/learning --minutes 12 [--steps N] \\
        [--batch 32 --group 16 --lr 1e-6] [--lora RANK] [--selector random] [--data data/frozenlake] [--repeats 4] \\
        [--set KEY=VALUE ...]

MODEL is a Hugging Face model folder, or a GGUF file, which transformers turns into one
(dequantized to bf16) in <out>/model first. The steps, in order, each on all of the machine's GPUs:

1. serve MODEL with vLLM's OpenAI-compatible server and run `scripts/evaluate.py --model openai`
   on the test split (success rate with its interval, invalid-action rate, by map size);
2. train it with `configs/frozenlake.yaml` (with `--selector difficulty`, `configs/frozenlake_difficulty.yaml`:
   BOTS picks the maps) through `frozenlake/main.py` (batch, group
   and learning rate from the flags, a LoRA adapter instead of the whole model with --lora (rftkit.lora's
   defaults but the rank), anything else with --set), for --steps explore steps, or for
   --minutes of wall time from the launch: then the run is interrupted as Ctrl-C would, and the
   last checkpoint it completed (one every --save-every trainer steps) is the trained model;
3. serve the last checkpoint (with --lora: MODEL with the checkpoint's adapter, through vLLM's LoRA
   serving) and evaluate it the same way;
4. draw the training curves (`rollout/success/mean`, `rollout/invalid_actions/mean`,
   `rollout/env_steps/mean`, `sample/model_version/mean`) with scripts/plot_runs.py, and the two
   evaluations side by side (before_after.png and before_after.md), with a map-by-map sign test
   (both evaluations play the same maps with the same seeds) and how often a move went into a hole next
   to the agent where a safe tile was there too.

`--before-only` stops after step 1, so that a later hold's run can skip it (`--skip-before`, with
<out>/before copied in). `--report-only` redraws step 4's comparison from <out>/before and <out>/after and
runs nothing. The comparison splits the maps by whether the training split holds their layout: by the
evaluations' own marks (evaluate.py compares the test split with the train split beside it), or by the
split that `--train` names.

Each step's output goes to <out>; a step that fails stops the script with its log's last lines.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from frozenlake.example import FROZENLAKE
from frozenlake.report import compare
from rftkit import lora
from rftkit.cli import ArgumentParser, above, at_least
from rftkit.files import check_writable
from rftkit.inputs import reports_input_errors
from rftkit.inputs.model_path import check_model
from runkit.commands import evaluate_command, launch_command
from runkit.runs import job_dir, last_checkpoint
from runkit.serving import engine_flags, model_folder, vllm_server
from runkit.steps import log, run_step
from runkit.training_flags import check_model_and_length, require_cuda

from rftkit.example import REPO  # the checkout's root

# The rollouts' success, invalid moves and episode length; the share of a step's groups whose rollouts all
# scored alike, which GRPO learns nothing from (Trinity skips them); and the policy version the trainer's
# batch was sampled from, which shows how far training lags the rollouts (one experience per move means an
# explore step makes several trainer batches).
CURVES = ["rollout/success/mean", "rollout/invalid_actions/mean", "rollout/env_steps/mean",
          "experience_pipeline/skipped_group_ratio", "sample/model_version/mean"]


def train_command(model: Path, data: Path, checkpoints: Path, args: argparse.Namespace) -> list[str]:
    settings = {"buffer.batch_size": args.batch, "algorithm.repeat_times": args.group,
                "algorithm.optimizer.lr": args.lr,
                # evaluation is steps 1 and 3 of this script: none inside training, not even Trinity's
                # step-0 pass over the test split, which took 3 of the first run's 12 minutes
                "explorer.eval_on_startup": False, "explorer.eval_interval": 10 ** 6}
    if args.steps is not None:
        settings["buffer.total_steps"] = args.steps
    if args.minutes is None:
        settings["trainer.save_interval"] = args.steps  # one checkpoint, at the end
    else:  # the run will be cut short: keep recent checkpoints, each with weights to serve (an adapter has its own)
        settings.update({"trainer.save_interval": args.save_every, "trainer.max_checkpoints_to_keep": 2,
                         **({} if args.lora else {"trainer.save_hf_checkpoint": "always"})})
    settings.update(lora.overrides(args.lora, None, None))
    return launch_command(FROZENLAKE, model=model, checkpoints=checkpoints, config=FROZENLAKE.configs[args.selector],
                          data={"train": data, "eval": data}, attn=args.attn, settings=settings, extra=args.set)


def draw_curves(out: Path) -> None:
    """curves.png (and .md) from the training run's tensorboard files, if it got as far as writing any."""
    run_dir = job_dir(out / "checkpoints")
    if run_dir is None:
        log("no training logs to draw curves from")
        return
    try:
        run_step([sys.executable, "scripts/plot_runs.py", f"trained={run_dir}", "--scalars", *CURVES,
                  "--out", str(out / "curves.png")], out / "curves.log", check=True)
    except SystemExit as failed:  # never hide the training's own error behind the plot's
        log(f"warning: no curves: {failed}")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.frozenlake_learning", description=__doc__)
    parser.add_argument("model", type=Path, nargs="?", help="HF model folder, or a .gguf file to convert")
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder: both evaluations, the run's checkpoints, logs and charts")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "frozenlake",
                        help="train and test splits (default: %(default)s, generated if missing)")
    parser.add_argument("--steps", type=at_least(1), help="explore steps (default: one pass over the train split)")
    parser.add_argument("--minutes", type=above(0),
                        help="stop training after this much wall time (start-up included; default: no limit)")
    parser.add_argument("--save-every", type=at_least(1), default=10,
                        help="with --minutes: trainer steps between checkpoints (default: %(default)s)")
    parser.add_argument("--batch", type=at_least(1), default=32, help="maps per step (default: %(default)s)")
    parser.add_argument("--group", type=at_least(1), default=16, help="rollouts per map (default: %(default)s)")
    parser.add_argument("--lr", type=above(0), default=1e-6, help="learning rate (default: %(default)s)")
    parser.add_argument("--lora", type=at_least(1), metavar="RANK",
                        help="train a LoRA adapter of this rank (alpha and layers: the launcher's defaults)")
    parser.add_argument("--selector", choices=sorted(FROZENLAKE.configs), default=FROZENLAKE.default_selector,
                        help="how training picks its maps: the config of that task selector (default: %(default)s)")
    parser.add_argument("--repeats", type=at_least(1), default=4, help="evaluation episodes per test map")
    parser.add_argument("--max-tokens", type=at_least(1), default=2048, help="tokens per reply, as in training")
    parser.add_argument("--max-model-len", type=at_least(1), default=25600, help="vLLM context, as in training")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to the launcher")
    parser.add_argument("--attn", default=None, help="the launcher's --attn (default: the launcher's, auto)")
    parser.add_argument("--skip-before", action="store_true", help="reuse <out>/before/report.json")
    parser.add_argument("--before-only", action="store_true",
                        help="only evaluate the starting model into <out>/before, which a later --skip-before reuses")
    parser.add_argument("--report-only", action="store_true",
                        help="only redraw before_after.{md,png} from <out>/before and <out>/after")
    parser.add_argument("--train", type=Path,
                        help="with --report-only: the training split (a .parquet file) to tell the maps it holds by "
                             "(default: the evaluations' own marks)")
    return parser


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.report_only:
        missing = [str(args.out / side / "report.json") for side in ("before", "after")
                   if not (args.out / side / "report.json").is_file()]
        if missing:
            parser.error(f"--report-only: no evaluation at {', '.join(missing)} (expected <out>/before and "
                         f"<out>/after from scripts/evaluate.py)")
        if args.train is not None:
            FROZENLAKE.open_split(args.train, "--train")
        print(compare(args.out / "before", args.out / "after", args.out, args.train), flush=True)
        return 0
    if args.model is None:
        parser.error("model: required unless --report-only")
    if args.before_only:
        check_model(args.model, "model", gguf=True)
    else:
        check_model_and_length(parser, args)
    require_cuda("serving and training the model")
    out = args.out.resolve()
    check_writable(out, "--out")
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    if not (data / "test.parquet").is_file():
        run_step([sys.executable, "scripts/get_frozenlake_data.py", "--local_dir", str(data)], out / "data.log",
                 check=True)
    started = time.time()

    model = model_folder(args.model, out / "model")
    flags = engine_flags(FROZENLAKE.config_path(args.selector), model)
    if not args.skip_before:
        with vllm_server(model, model, out / "serve_before.log", args.max_model_len, flags) as url:
            log(f"evaluating {model} (served at {url})")
            run_step(evaluate_command(url, data, out / "before", args.repeats, args.max_tokens),
                     out / "eval_before.log", check=True)
    if args.before_only:
        log(f"done in {time.time() - started:.0f} s: {out}/before")
        return 0
    log(f"training: {args.steps or 'all'} explore steps{f', at most {args.minutes:g} minutes' if args.minutes else ''}")
    train_started = time.time()
    try:
        interrupted = run_step(train_command(model, data, out / "checkpoints", args), out / "train.log",
                               timeout=None if args.minutes is None else args.minutes * 60, on_timeout="interrupt",
                               check=True).interrupted
    finally:  # a run that failed still shows what it did before failing
        draw_curves(out)
    trained = last_checkpoint(out / "checkpoints", adapter=bool(args.lora))
    log(f"trained {'until interrupted' if interrupted else 'to the end'} in {time.time() - train_started:.0f} s; "
        f"evaluating {trained.parent.parent.name}")
    weights, adapter = (model, trained) if args.lora else (trained, None)
    with vllm_server(weights, model, out / "serve_after.log", args.max_model_len, flags, adapter=adapter) as url:
        log(f"evaluating {trained}")
        run_step(evaluate_command(url, data, out / "after", args.repeats, args.max_tokens), out / "eval_after.log",
                 check=True)

    print(compare(out / "before", out / "after", out), flush=True)
    log(f"done in {time.time() - started:.0f} s: {out}/before_after.png, {out}/curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
