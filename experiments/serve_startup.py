"""An evaluation's model server, measured: how long it takes to answer, and how fast it then evaluates.

    python -m experiments.serve_startup MODEL --out OUT --data DIR [--repeats 2] \\
        --variant cold \\
        --variant 'compiled=--compilation-config={"mode":3}' \\
        --variant eager=--enforce-eager

Each variant serves MODEL through the experiments' own `runkit.serving.vllm_server`, with the FrozenLake
config's engine flags (its parsers, and its compilation settings: no torch.compile, CUDA graphs for
decoding; a later --compilation-config replaces them) and an 8,192-token context, one after the other,
plus its own items (NAME=ITEM,ITEM): an UPPER_CASE KEY=VALUE is an environment variable of the server, a
--flag[=value] is added to `vllm serve`. Its compile caches start empty (<out>/<variant>/cache) unless it
names them, as `experiments.startup`'s launches do. Measured for each: the seconds from the server's start
to its first answer, the engine's own init, torch.compile and CUDA-graph seconds as vLLM logs them, and
the seconds scripts/evaluate.py then takes for --repeats episodes of every map of DIR's test split: a
faster start must not cost a slower evaluation. Writes <out>/serve_startup.md and <out>/serve_startup.png;
`--report-only` redraws them from <out>/<variant>/serve.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from experiments.startup import ENV_KEY, launch_env
from frozenlake.example import FROZENLAKE
from rftkit.cli import ArgumentParser, at_least
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, read_json, reports_input_errors
from rftkit.inputs.model_path import check_model
from runkit.commands import evaluate_command
from runkit.serving import engine_flags, model_folder, vllm_server
from runkit.steps import log, run_step
from runkit.training_flags import require_cuda

# Smaller than experiments.frozenlake_learning's (25,600 and 2,048): ample for a FrozenLake episode, and
# what the dated figures were measured with.
MAX_MODEL_LEN = 8192  # the server's context
MAX_TOKENS = 512  # tokens per reply in the evaluation
# vLLM's own account of its start, from its log: label -> pattern whose group is seconds
VLLM_LINES = {
    "engine init": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "torch.compile": r"torch\.compile (?:takes|took) ([\d.]+) s in total",
    "CUDA graphs": r"Graph capturing finished in ([\d.]+) sec",
}


def parse_variant(text: str) -> tuple[str, dict[str, str], list[str]]:
    """NAME or NAME=ITEM,ITEM -> (NAME, environment variables, `vllm serve` flags)."""
    name, _, items = text.partition("=")
    if not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or NAME=ITEM,ITEM")
    env, flags = {}, []
    for item in filter(None, items.split(",")):
        key, _, value = item.partition("=")
        if item.startswith("--"):
            flags.append(item)
        elif ENV_KEY.fullmatch(key) and value:
            env[key] = value
        else:
            raise argparse.ArgumentTypeError(f"{text!r}: {item!r} is neither KEY=VALUE (upper case) nor a --flag")
    return name, env, flags


def vllm_seconds(log_file: Path) -> dict[str, float]:
    """The seconds vLLM reports for each of VLLM_LINES that its log has (the last of each)."""
    text = log_file.read_text(errors="replace")
    found = {label: re.findall(pattern, text) for label, pattern in VLLM_LINES.items()}
    return {label: float(values[-1]) for label, values in found.items() if values}


def measure(model: Path, data: Path, folder: Path, env_items: dict[str, str], flags: list[str],
            repeats: int) -> dict:
    """Serve `model` with this variant's settings (its log: serve.log), evaluate through it; its figures, kept
    in serve.json."""
    folder.mkdir(parents=True, exist_ok=True)
    env, _ = launch_env(folder, [f"{key}={value}" for key, value in env_items.items()])
    log_file = folder / "serve.log"
    started = time.monotonic()
    with vllm_server(model, model, log_file, MAX_MODEL_LEN, [*engine_flags(FROZENLAKE.config_path(), model), *flags],
                     env=env) as url:
        ready = time.monotonic() - started
        log(f"{folder.name}: answering after {ready:.1f} s")
        step = run_step(evaluate_command(url, data, folder / "eval", repeats, MAX_TOKENS), folder / "eval.log",
                        label=f"{folder.name} evaluation", check=True)
    episodes = read_json(folder / "eval" / "report.json")["episodes"]
    figures = {"ready": ready, "evaluation": step.seconds, "episodes": episodes, "flags": flags,
               "environment": sorted(env_items)}
    (folder / "serve.json").write_text(json.dumps(figures, indent=1))
    return figures


def report(out: Path, names: list[str]) -> str:
    """serve_startup.md (returned) and serve_startup.png from the variants' serve.json."""
    from rftkit.reports.plots import plt, save_png

    results = {}
    for name in names:
        path = out / name / "serve.json"
        if not path.is_file():
            raise InputError(f"{path}: missing (was variant {name} measured into {out}?)")
        results[name] = {**read_json(path), **vllm_seconds(out / name / "serve.log")}

    def row(label: str, key: str, digits: int = 0) -> str:
        cells = ["-" if key not in results[n] else f"{results[n][key]:.{digits}f}" for n in names]
        return f"| {label} | " + " | ".join(cells) + " |"

    lines = ["| seconds | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
             row("server start to its first answer", "ready", 1),
             *(row(f"  of which {label} (vLLM's log)", label, 1) for label in VLLM_LINES),
             row("evaluation", "evaluation"), row("episodes evaluated", "episodes"),
             "| episodes per second | " + " | ".join(
                 f"{results[n]['episodes'] / results[n]['evaluation']:.2f}" for n in names) + " |",
             "| server flags | " + " | ".join(" ".join(results[n]["flags"]) or "-" for n in names) + " |"]
    text = "\n".join(lines) + "\n"

    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.6 * len(names)))
    for i, name in enumerate(names):
        ax.barh(i, results[name]["ready"], color="C0", height=0.6, label="start to first answer" if i == 0 else None)
        ax.barh(i, results[name]["evaluation"], left=results[name]["ready"], color="C1", height=0.6,
                label=f"evaluation ({results[name]['episodes']} episodes)" if i == 0 else None)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the server's start")
    ax.set_title("an evaluation's server: its start, then the evaluation")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    with atomic_paths(out / "serve_startup.png", out / "serve_startup.md") as (png, md):
        save_png(fig, png)
        md.write_text(text)
    return text


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.serve_startup", description=__doc__)
    parser.add_argument("model", type=Path, nargs="?", help="HF model folder, or a .gguf file to convert")
    parser.add_argument("--out", type=Path, required=True, help="a folder per variant, and the report")
    parser.add_argument("--data", type=Path, help="FrozenLake splits; test.parquet is evaluated (required unless "
                                                  "--report-only)")
    parser.add_argument("--variant", action="append", type=parse_variant, required=True, metavar="NAME[=ITEM,...]",
                        help="a variant to serve, in order: a name, its environment variables and server flags")
    parser.add_argument("--repeats", type=at_least(1), default=2, help="episodes per map in each evaluation")
    parser.add_argument("--report-only", action="store_true", help="only redraw the report from <out>/<variant>/")
    args = parser.parse_args(argv)
    names = [name for name, _, _ in args.variant]
    if len(set(names)) != len(names):
        parser.error(f"--variant: each name once, got {names}")
    if not args.report_only:
        if args.model is None or args.data is None:
            parser.error("model, --data: required unless --report-only")
        check_model(args.model, "model", gguf=True)
        if not (args.data / "test.parquet").is_file():
            parser.error(f"--data {args.data}: no test.parquet there (scripts/get_frozenlake_data.py makes it)")
        require_cuda("serving the model")
        out = args.out.resolve()
        check_writable(out, "--out")
        model = model_folder(args.model, out / "model")
        for name, env_items, flags in args.variant:
            measure(model, args.data.resolve(), out / name, env_items, flags, args.repeats)
    print(report(args.out, names), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
