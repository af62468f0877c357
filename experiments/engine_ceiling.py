"""The engine's ceiling for a run's own rollouts: the same requests, by their prompt and reply lengths, sent
straight to vLLM at once, beside the rate the run's explorer made them at.

    python -m experiments.engine_ceiling RUN MODEL --out OUT [--steps A:B] [--memory 0.25]

RUN is a run's folder (`<checkpoint dir>/<project>/<name>`): its experiences (`buffer/experience_buffer.jsonl`,
one per model call, with the call's prompt and reply lengths in tokens) and its explorer's tensorboard
scalars (when each explore step's rollouts were collected, its sync groups and evaluations). The explorer's
rate is the replies' tokens over the wall time from the end of step A-1, which must end a sync group, to the
end of step B, with no evaluation in between (its requests would share the engine unrecorded). The ceiling
is vLLM's offline engine given every request at once, random prompt tokens of each request's length and
exactly its reply length (`ignore_eos`), at the run's temperature, on MODEL with `--memory` of the GPU (a
colocated engine's quarter by default). Random prompts share no prefix, where a multi-turn episode's turns
do: with prefix caching the engine could do better still, so the ratio is an upper bound on how close the
explorer is. Writes engine_ceiling.json and engine_ceiling.md to --out, and prints the table. The engine
needs a CUDA GPU; everything else runs anywhere. A run that evaluates as it trains needs a window between
its evaluations: set explorer.eval_interval above the steps the window needs.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from rftkit.cli import ArgumentParser, above, step_range
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, reports_input_errors
from rftkit.reports.tensorboard import read_points

EXPERIENCES = Path("buffer") / "experience_buffer.jsonl"
COLLECTED, EVAL = "explorer/time/wait_explore_step", "time/eval"
SYNC_GROUP = "explore/time/sync_interval"  # logged at the last step of each sync group


def requests(run: Path, first: int, last: int) -> list[tuple[int, int]]:
    """(prompt tokens, reply tokens) of each model call the explorer made in explore steps first..last."""
    found = []
    with open(run / EXPERIENCES, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                experience = json.loads(line)
                step = experience["eid"]["batch"]
                if isinstance(step, int) and first <= step <= last:
                    found.append((int(experience["prompt_length"]), int(experience["response_length"])))
            except (ValueError, KeyError, TypeError) as error:
                raise InputError(f"{run / EXPERIENCES}, line {number}: expected an experience with eid.batch, "
                                 f"prompt_length and response_length ({type(error).__name__}: {error})") from None
    return found


def explorer_seconds(run: Path, first: int, last: int) -> float:
    """Wall seconds the explorer took for explore steps first..last: from the end of step first-1, which must end
    a sync group (the explorer then waits for every step in flight, so no request of the window was sent
    before), to the end of step last. A window that an evaluation overlaps is refused: its requests shared the
    engine and are not in the experiences."""
    explorer = read_points(run / "monitor" / "tensorboard" / "explorer")
    ends = {point.step: point.wall_time for point in explorer.get(COLLECTED, [])}
    groups = sorted(point.step for point in explorer.get(SYNC_GROUP, []))
    if first - 1 not in ends or last not in ends:
        have = sorted(ends)
        raise InputError(f"--steps {first}:{last}: the explorer logged the ends of steps {have[0]} to {have[-1]}; "
                         f"the window needs the end of step {first - 1} too")
    if first - 1 not in groups:
        raise InputError(f"--steps {first}:{last}: step {first - 1} ends no sync group (the explorer's end at steps "
                         f"{', '.join(map(str, groups[:12]))}{' ...' if len(groups) > 12 else ''}); start the "
                         f"window after one, so that none of its requests was sent before it")
    since, until = ends[first - 1], ends[last]
    overlapping = [point.step for point in explorer.get(EVAL, [])
                   if point.wall_time - point.value < until and point.wall_time > since]
    if overlapping:
        raise InputError(f"--steps {first}:{last}: the evaluation of step {overlapping[0]} ran in the window, on the "
                         f"same engine, and its requests are not among the experiences; choose steps between "
                         f"evaluations")
    return until - since


def engine_seconds(model: Path, shapes: list[tuple[int, int]], temperature: float, memory: float) -> float:
    """Seconds vLLM's offline engine takes for `shapes`, all given at once, after a warm-up of a few."""
    from vllm import LLM, SamplingParams

    engine = LLM(model=str(model), gpu_memory_utilization=memory, seed=0,
                 max_model_len=max(prompt + reply for prompt, reply in shapes) + 16)
    vocabulary = engine.get_tokenizer().vocab_size
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(vocabulary) for _ in range(prompt)]} for prompt, _ in shapes]
    params = [SamplingParams(max_tokens=reply, min_tokens=reply, ignore_eos=True, temperature=temperature, seed=i)
              for i, (_, reply) in enumerate(shapes)]
    engine.generate(prompts[:8], params[:8], use_tqdm=False)  # compile and capture before the clock starts
    started = time.perf_counter()
    outputs = engine.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - started
    made = sum(len(output.outputs[0].token_ids) for output in outputs)
    if made != sum(reply for _, reply in shapes):
        raise RuntimeError(f"vLLM made {made} reply tokens, asked for {sum(reply for _, reply in shapes)}")
    return seconds


def table(result: dict) -> str:
    rows = ["| | seconds | reply tokens/s | requests/s |", "|---|---|---|---|"]
    for who in ("explorer", "engine"):
        seconds = result[f"{who}_seconds"]
        rows.append(f"| {who} | {seconds:.1f} | {result['reply_tokens'] / seconds:,.0f} | "
                    f"{result['requests'] / seconds:.1f} |")
    ratio = result["engine_seconds"] / result["explorer_seconds"]
    return (f"{result['requests']} requests in explore steps {result['steps']}: {result['prompt_tokens']:,} prompt "
            f"and {result['reply_tokens']:,} reply tokens\n\n" + "\n".join(rows)
            + f"\n\nthe explorer at {ratio:.0%} of the engine's rate\n")


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.engine_ceiling", description=__doc__)
    parser.add_argument("run", metavar="RUN", type=Path, help="a run's folder, <checkpoint dir>/<project>/<name>")
    parser.add_argument("model", metavar="MODEL", type=Path, help="the run's model folder (its start is enough: "
                                                                  "the rate does not depend on the weights)")
    parser.add_argument("--steps", metavar="A:B", type=step_range(2), required=True,
                        help="explore steps to replay (A >= 2: the end of step A-1 starts the explorer's clock)")
    parser.add_argument("--memory", type=above(0), default=0.25, help="the engine's share of the GPU's memory")
    parser.add_argument("--temperature", type=float, default=1.0, help="the run's sampling temperature")
    parser.add_argument("--out", type=Path, required=True, help="folder for engine_ceiling.json and .md")
    args = parser.parse_args(argv)
    first, last = args.steps
    if not (args.run / EXPERIENCES).is_file():
        raise InputError(f"RUN {args.run}: no {EXPERIENCES}; expected a run's folder, "
                         f"<checkpoint dir>/<project>/<name>")
    if not (args.model / "config.json").is_file():
        raise InputError(f"MODEL {args.model}: no config.json; expected a model folder")
    check_writable(args.out, "--out")
    shapes = requests(args.run, first, last)
    if not shapes:
        raise InputError(f"--steps {first}:{last}: the run kept no experience of those explore steps")
    result = {"steps": f"{first}:{last}", "requests": len(shapes), "prompt_tokens": sum(p for p, _ in shapes),
              "reply_tokens": sum(r for _, r in shapes), "explorer_seconds": explorer_seconds(args.run, first, last)}
    print(f"replaying {len(shapes)} requests on vLLM ...", flush=True)
    result["engine_seconds"] = engine_seconds(args.model, shapes, args.temperature, args.memory)
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_paths(args.out / "engine_ceiling.json", args.out / "engine_ceiling.md") as (js, md):
        js.write_text(json.dumps(result, indent=1), encoding="utf-8")
        md.write_text(table(result), encoding="utf-8")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
