"""The engine's ceiling for a run's own rollouts: the same requests, by their prompt and reply lengths, sent
straight to vLLM, beside the rate the run's explorer made them at.

    python -m experiments.engine_ceiling RUN MODEL --out OUT --steps A:B [--memory 0.25] [--served]
    python -m experiments.engine_ceiling RUN --out OUT --steps A:B --report-only   (the table again, no GPU)

RUN is a run's folder (`<checkpoint dir>/<project>/<name>`): its calls' prompt and reply lengths in tokens (from
`buffer/explorer_output.db`, the experience pipeline's input; else the trainer's queue, which lacks the groups the
pipeline dropped, so the explorer's share comes out low) and its explorer's tensorboard scalars. The explorer's
rate is the reply tokens over the wall time from the end of step A-1, which must end a sync group (for A = 1: from
the explorer's first weights, the one window of a fully_async run), to the end of step B, with no evaluation in
between (its requests would share the engine unrecorded); and over the time its steps spent on their rollouts
alone, without what a colocated explorer waits for between steps.

The engine is vLLM's offline engine on MODEL with `--memory` of the GPU (a colocated engine's quarter by default),
compiled as the run's engine was (its launch config's compilation settings, where kept), each request random prompt
tokens of its length and exactly its reply length (`ignore_eos`) with each reply token's logprob, as Trinity asks,
at the run's temperature. It is timed all at once, and turn by turn: for each explore step, the first call of each
episode together, then the second, and so on, each prompt the episode's previous prompt and reply then random
tokens up to the recorded length (the history a multi-turn episode sends again, which prefix caching can reuse).
All at once is more than any explorer can ask: an episode's next call waits for its last reply.

With --served the calls also go to `vllm serve` of MODEL (same memory and compilation), as token ids to
/v1/completions from a client in this process: turn by turn, and episode by episode, each episode's next call sent
as soon as its own reply is back (a step's episodes at once). The server against the offline engine is what
serving over HTTP costs, less the chat template and tokenizing that token ids skip; the explorer against the
server episode by episode is what the rest costs: those two, Trinity's runners and slots, agentscope. Writes
engine_ceiling.json and engine_ceiling.md to --out and prints the table. The engines need a CUDA GPU. A run that
evaluates as it trains needs a window between evaluations: set explorer.eval_interval above the window's steps.

Why one module: its figures are ratios of one window's rates, the explorer's and each engine's, so the window,
the calls read from it and every replay of them have to be the same, and are read together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

from rftkit import startup
from rftkit.cli import ArgumentParser, above, step_range
from rftkit.files import atomic_paths, check_writable, packed_or_plain
from rftkit.inputs import InputError, open_text, read_json, reports_input_errors
from rftkit.reports.tensorboard import EVAL_TIME, ROLLOUT_WAIT, read_points
from runkit.runs import launch_config

EXPERIENCES = Path("buffer") / "experience_buffer.jsonl"  # the trainer's queue: what the pipeline kept
PIPELINE_INPUT = Path("buffer") / "explorer_output.db"  # every experience, before the pipeline's operators
SYNC_GROUP = "explore/time/sync_interval"  # logged at the last step of each sync group
EXPLORER_START = "first weights sent to the engine"  # the start-up timeline's phase before the first request
# The client drops an idle connection this soon, before vLLM's server closes it (VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
# 5 s): reusing one the server is closing ends its request with httpx.ReadError.
KEEPALIVE_SECONDS = 2.0


def _queued(run: Path):
    """(step, task, run id, prompt tokens, reply tokens) of each experience in the trainer's queue, in file order
    (gzipped where the run was kept under docs/)."""
    queue = packed_or_plain(run / EXPERIENCES)
    with open_text(queue) as lines:
        for number, line in enumerate(lines, 1):
            try:
                experience = json.loads(line)
                eid = experience["eid"]
                call = (eid["batch"], eid.get("task"), eid.get("run"), int(experience["prompt_length"]),
                        int(experience["response_length"]))
            except (ValueError, KeyError, TypeError) as error:
                raise InputError(f"{queue}, line {number}: expected an experience with eid.batch, "
                                 f"prompt_length and response_length ({type(error).__name__}: {error})") from None
            yield call


def _pipeline_input(run: Path):
    """The same for every experience the explorer made, from the experience pipeline's input, which Trinity keeps in
    SQLite (`data_processor.experience_pipeline.input_save_path`), in the order written."""
    import sqlite3

    from trinity.common.experience import Experience

    with contextlib.closing(sqlite3.connect(f"file:{run / PIPELINE_INPUT}?mode=ro", uri=True)) as db:
        try:
            rows = db.execute("SELECT id, experience_bytes FROM pipeline_input_blob ORDER BY id").fetchall()
        except sqlite3.Error as error:
            raise InputError(f"{run / PIPELINE_INPUT}: expected Trinity's pipeline_input_blob table "
                             f"({error})") from None
    for row, blob in rows:
        try:
            experience = Experience.deserialize(blob)
            eid = experience.eid
            call = (eid.batch, eid.task, eid.run, int(experience.prompt_length),
                    len(experience.tokens) - int(experience.prompt_length))
        except Exception as error:  # a torn or foreign blob: whatever Trinity's deserializer raises
            raise InputError(f"{run / PIPELINE_INPUT}, pipeline_input_blob id {row}: expected a Trinity experience "
                             f"({type(error).__name__}: {error})") from None
        yield call


def episodes(run: Path, first: int, last: int) -> dict[int, list[list[tuple[int, int]]]]:
    """Per explore step first..last, its episodes, each the (prompt tokens, reply tokens) of its model calls in the
    order they were made: an episode is its experiences' task and run ids, which Trinity writes in call order.
    Read from the pipeline's input where the run kept it: the trainer's queue lacks the groups the pipeline's
    operators dropped, a large share of a FrozenLake run's calls (its std_threshold drops every group whose rewards
    all agree)."""
    found: dict[int, dict[tuple, list[tuple[int, int]]]] = {}
    rows = _pipeline_input(run) if (run / PIPELINE_INPUT).is_file() else _queued(run)
    for step, task, repeat, prompt, reply in rows:
        if isinstance(step, int) and first <= step <= last:
            found.setdefault(step, {}).setdefault((task, repeat), []).append((prompt, reply))
    return {step: list(calls.values()) for step, calls in sorted(found.items())}


def calls(steps: dict[int, list[list[tuple[int, int]]]]) -> list[tuple[int, int]]:
    """`episodes`' calls in one list, step by step and episode by episode."""
    return [call for step in steps.values() for episode in step for call in episode]


def next_prompt(previous: list[int], reply: list[int], length: int, rng: random.Random, vocabulary: int) -> list[int]:
    """A call's prompt token ids: the episode's previous prompt and reply, then random tokens up to `length`; only
    random tokens where `length` is shorter than that history (an agent that dropped part of it)."""
    history = previous + reply
    if len(history) > length:
        history = []
    return history + [rng.randrange(vocabulary) for _ in range(length - len(history))]


Generate = Callable[[list[list[int]], list[int]], list[list[int]]]  # prompts' ids, reply lengths -> replies' ids


def replay_by_turns(generate: Generate, steps: dict[int, list[list[tuple[int, int]]]], vocabulary: int,
                    seed: int = 0) -> int:
    """Every call of `steps` through `generate`, a step at a time and within it a turn at a time (the k-th call of
    each episode together); returns the reply tokens made."""
    rng, made = random.Random(seed), 0
    for step in steps.values():
        history: list[tuple[list[int], list[int]]] = [([], []) for _ in step]
        for turn in range(max(len(episode) for episode in step)):
            playing = [i for i, episode in enumerate(step) if len(episode) > turn]
            prompts = [next_prompt(*history[i], step[i][turn][0], rng, vocabulary) for i in playing]
            replies = generate(prompts, [step[i][turn][1] for i in playing])
            for i, prompt, reply in zip(playing, prompts, replies):
                history[i] = (prompt, list(reply))
                made += len(reply)
    return made


async def replay_by_episodes(complete: Callable[[list[int], int], Awaitable[list[int]]],
                             steps: dict[int, list[list[tuple[int, int]]]], vocabulary: int, seed: int = 0) -> int:
    """Every call of `steps` through the coroutine `complete(prompt ids, reply length)`, a step at a time and within
    it all its episodes at once, each episode's calls one after another with no wait for the others; returns the
    reply tokens made. Prompts are built as in replay_by_turns."""
    made = 0
    for number, step in steps.items():
        async def play(index: int, episode: list[tuple[int, int]]) -> int:
            rng, history, made_here = random.Random(f"{seed}:{number}:{index}"), ([], []), 0
            for prompt_length, reply_length in episode:
                prompt = next_prompt(*history, prompt_length, rng, vocabulary)
                history = (prompt, list(await complete(prompt, reply_length)))
                made_here += len(history[1])
            return made_here

        made += sum(await asyncio.gather(*(play(index, episode) for index, episode in enumerate(step))))
    return made


def served_seconds(url: str, steps: dict[int, list[list[tuple[int, int]]]], vocabulary: int,
                   temperature: float) -> dict[str, float]:
    """Seconds the calls of `steps` take through the OpenAI-compatible server at `url` (its /v1 base): turn by turn
    and episode by episode, each after a warm-up of a few calls."""
    import httpx

    from runkit.serving import SERVED_NAME

    loop = asyncio.new_event_loop()
    # no pool limit: a step's episodes are all in flight at once, more than httpx's default 100 connections
    client = httpx.AsyncClient(base_url=url, timeout=600,
                               limits=httpx.Limits(max_connections=None, keepalive_expiry=KEEPALIVE_SECONDS))

    async def complete(prompt: list[int], reply_length: int) -> list[int]:
        response = await client.post("/completions", json={
            "model": SERVED_NAME, "prompt": prompt, "max_tokens": reply_length, "min_tokens": reply_length,
            "ignore_eos": True, "temperature": temperature, "logprobs": 0, "return_token_ids": True})
        response.raise_for_status()
        return response.json()["choices"][0]["token_ids"]

    async def together(prompts: list[list[int]], replies: list[int]) -> list[list[int]]:
        return await asyncio.gather(*map(complete, prompts, replies))

    def generate(prompts: list[list[int]], replies: list[int]) -> list[list[int]]:
        return loop.run_until_complete(together(prompts, replies))

    shapes = calls(steps)
    try:
        warm_up(generate, shapes, vocabulary)
        seconds, made = {}, {}
        started = time.perf_counter()
        made["turns"] = replay_by_turns(generate, steps, vocabulary, seed=3)
        seconds["engine_served_turns_seconds"] = time.perf_counter() - started
        started = time.perf_counter()
        made["episodes"] = loop.run_until_complete(replay_by_episodes(complete, steps, vocabulary, seed=4))
        seconds["engine_served_episodes_seconds"] = time.perf_counter() - started
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    asked = sum(reply for _, reply in shapes)
    if set(made.values()) != {asked}:
        raise RuntimeError(f"the server made {made['turns']} and {made['episodes']} reply tokens, asked for {asked}")
    return seconds


def server_seconds(model: Path, steps: dict[int, list[list[tuple[int, int]]]], temperature: float, memory: float,
                   log: Path, compilation_config: dict | None = None) -> dict[str, float]:
    """served_seconds against `vllm serve` of `model` on this machine, with `memory` of the GPU, its log in `log`."""
    from transformers import AutoTokenizer

    from runkit.serving import vllm_server

    longest = max(prompt + reply for prompt, reply in calls(steps)) + 16
    vocabulary = AutoTokenizer.from_pretrained(model).vocab_size
    flags = ["--gpu-memory-utilization", str(memory)]
    if compilation_config:
        flags += ["--compilation-config", json.dumps(compilation_config, separators=(",", ":"))]
    with vllm_server(model, model, log, longest, flags) as url:
        return served_seconds(url, steps, vocabulary, temperature)


def warm_up(generate: Generate, shapes: list[tuple[int, int]], vocabulary: int) -> None:
    """A few calls before the clock starts (compile, capture), on tokens of their own: no prefix cache hit later."""
    rng = random.Random(2)
    generate([[rng.randrange(vocabulary) for _ in range(p)] for p, _ in shapes[:8]], [r for _, r in shapes[:8]])


def explorer_seconds(run: Path, first: int, last: int) -> dict[str, float]:
    """Seconds the explorer took for explore steps first..last: `explorer_seconds`, wall time from the end of step
    first-1, which must end a sync group (the explorer then waits for every step in flight, so no request of the
    window was sent before), to the end of step last; and `explorer_rollouts_seconds`, the part it spent waiting
    for its steps' rollouts, without the train steps and weight syncs a colocated explorer waits for between
    them. From step 1 the clock starts when the explorer got its first weights (the launch's start-up timeline),
    before any request: the one window of a fully_async run, whose explorer never waits for its steps in flight.
    A window that an evaluation overlaps is refused: its requests shared the engine and are not in the
    experiences."""
    explorer = read_points(run / "monitor" / "tensorboard" / "explorer")
    collected = explorer.get(ROLLOUT_WAIT, [])
    ends = {point.step: point.wall_time for point in collected}
    groups = sorted(point.step for point in explorer.get(SYNC_GROUP, []))
    needed = [step for step in (first - 1, last) if step and step not in ends]
    if needed:
        have = sorted(ends)
        raise InputError(f"--steps {first}:{last}: the explorer logged the ends of steps {have[0]} to {have[-1]}; "
                         f"the window needs the end of step {needed[0]} too")
    if first == 1:
        since = startup.phase_at(run / startup.FILE_NAME, EXPLORER_START)
        if since is None:
            raise InputError(f"--steps 1:{last}: {run / startup.FILE_NAME} has no {EXPLORER_START!r}, where a window "
                             f"from step 1 starts")
    elif first - 1 not in groups:
        raise InputError(f"--steps {first}:{last}: step {first - 1} ends no sync group (the explorer's end at steps "
                         f"{', '.join(map(str, groups[:12]))}{' ...' if len(groups) > 12 else ''}); start the "
                         f"window after one, so that none of its requests was sent before it, or at step 1")
    else:
        since = ends[first - 1]
    until = ends[last]
    overlapping = [point.step for point in explorer.get(EVAL_TIME, [])
                   if point.wall_time - point.value < until and point.wall_time > since]
    if overlapping:
        raise InputError(f"--steps {first}:{last}: the evaluation of step {overlapping[0]} ran in the window, on the "
                         f"same engine, and its requests are not among the experiences; choose steps between "
                         f"evaluations")
    return {"explorer_seconds": until - since,
            "explorer_rollouts_seconds": sum(point.value for point in collected if first <= point.step <= last)}


def compilation(run: Path) -> dict:
    """The run's engine's compilation settings (`explorer.rollout_model.extra_engine_args.compilation_config` of
    the config it was launched with, where kept; else vLLM's defaults): they decide how fast it decodes."""
    config = launch_config(run) or {}
    rollout = (config.get("explorer") or {}).get("rollout_model") or {}
    return dict((rollout.get("extra_engine_args") or {}).get("compilation_config") or {})


def engine_seconds(model: Path, steps: dict[int, list[list[tuple[int, int]]]], temperature: float,
                   memory: float, compilation_config: dict | None = None) -> dict[str, float]:
    """Seconds vLLM's offline engine takes for the calls of `steps`: all at once, and turn by turn
    (replay_by_turns), each after a warm-up of a few calls."""
    from vllm import LLM, SamplingParams

    shapes = calls(steps)
    engine = LLM(model=str(model), gpu_memory_utilization=memory, seed=0,
                 max_model_len=max(prompt + reply for prompt, reply in shapes) + 16,
                 **({"compilation_config": compilation_config} if compilation_config else {}))
    vocabulary = engine.get_tokenizer().vocab_size

    def generate(prompts: list[list[int]], replies: list[int]) -> list[list[int]]:
        params = [SamplingParams(max_tokens=reply, min_tokens=reply, ignore_eos=True, temperature=temperature,
                                 logprobs=0, seed=i) for i, reply in enumerate(replies)]
        outputs = engine.generate([{"prompt_token_ids": prompt} for prompt in prompts], params, use_tqdm=False)
        return [list(output.outputs[0].token_ids) for output in outputs]

    warm_up(generate, shapes, vocabulary)
    rng = random.Random(0)  # each replay draws its own tokens too
    prompts = [[rng.randrange(vocabulary) for _ in range(prompt)] for prompt, _ in shapes]
    seconds = {}
    started = time.perf_counter()
    made = sum(map(len, generate(prompts, [reply for _, reply in shapes])))
    seconds["engine_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    made_by_turns = replay_by_turns(generate, steps, vocabulary, seed=1)
    seconds["engine_turns_seconds"] = time.perf_counter() - started
    asked = sum(reply for _, reply in shapes)
    if made != asked or made_by_turns != asked:
        raise RuntimeError(f"vLLM made {made} and {made_by_turns} reply tokens, asked for {asked}")
    return seconds


# the table's rows: result key prefix -> name; and how the explorer's share of each engine row reads
ROWS = {"explorer": "explorer", "explorer_rollouts": "explorer, its steps' rollouts alone",
        "engine": "engine, all at once",
        "engine_turns": "engine, turn by turn (a step's episodes at once)",
        "engine_served_turns": "vLLM's server, turn by turn",
        "engine_served_episodes": "vLLM's server, episode by episode (a step's episodes at once)"}
SHARES = {"engine": "of the engine's rate all at once", "engine_turns": "of its rate turn by turn",
          "engine_served_turns": "of the server's turn by turn",
          "engine_served_episodes": "of the server's episode by episode"}
# the ceilings the explorer's rollouts alone are set against
ALONE = {"engine_turns": "of the turn-by-turn rate", "engine_served_episodes": "of the server's episode by episode"}


def table(result: dict) -> str:
    rows = ["| | seconds | reply tokens/s | requests/s |", "|---|---|---|---|"]
    for key, name in ROWS.items():
        seconds = result.get(f"{key}_seconds")
        if seconds is not None:
            rows.append(f"| {name} | {seconds:.1f} | {result['reply_tokens'] / seconds:,.0f} | "
                        f"{result['requests'] / seconds:.1f} |")
    ratios = [f"{result[f'{key}_seconds'] / result['explorer_seconds']:.0%} {share}"
              for key, share in SHARES.items() if result.get(f"{key}_seconds") is not None]
    alone = [f"{result[f'{key}_seconds'] / result['explorer_rollouts_seconds']:.0%} {share}"
             for key, share in ALONE.items()
             if result.get("explorer_rollouts_seconds") and result.get(f"{key}_seconds") is not None]
    return (f"{result['requests']} requests in explore steps {result['steps']}: {result['prompt_tokens']:,} prompt "
            f"and {result['reply_tokens']:,} reply tokens\n\n" + "\n".join(rows)
            + f"\n\nthe explorer at {', and '.join(ratios)}"
            + (f"; its steps' rollouts alone at {', '.join(alone)}" if alone else "") + "\n")


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.engine_ceiling", description=__doc__)
    parser.add_argument("run", metavar="RUN", type=Path, help="a run's folder, <checkpoint dir>/<project>/<name>")
    parser.add_argument("model", metavar="MODEL", type=Path, nargs="?",
                        help="the run's model folder (its start is enough: the rate does not depend on the weights)")
    parser.add_argument("--steps", metavar="A:B", type=step_range(1), required=True,
                        help="explore steps to replay (the end of step A-1 starts the explorer's clock; for A = 1, "
                             "the explorer's first weights)")
    parser.add_argument("--memory", type=above(0), default=0.25, help="the engine's share of the GPU's memory")
    parser.add_argument("--temperature", type=float, default=1.0, help="the run's sampling temperature")
    parser.add_argument("--out", type=Path, required=True, help="folder for engine_ceiling.json and .md")
    parser.add_argument("--served", action="store_true",
                        help="also send the calls through `vllm serve` of MODEL, turn by turn and episode by episode")
    parser.add_argument("--report-only", action="store_true",
                        help="no GPU: write the table again from --out's engine_ceiling.json, the explorer's figures "
                             "read again from RUN")
    args = parser.parse_args(argv)
    first, last = args.steps
    check_writable(args.out, "--out")
    if args.report_only:
        kept = args.out / "engine_ceiling.json"
        if not kept.is_file():
            raise InputError(f"--out {args.out}: no engine_ceiling.json to report on (run without --report-only)")
        result = read_json(kept)
        if result.get("steps") != f"{first}:{last}":
            raise InputError(f"--steps {first}:{last}: {kept} replayed steps {result.get('steps')}")
        result.update(explorer_seconds(args.run, first, last))
        write(args.out, result)
        return 0
    if not ((args.run / PIPELINE_INPUT).is_file() or packed_or_plain(args.run / EXPERIENCES).is_file()):
        raise InputError(f"RUN {args.run}: no {PIPELINE_INPUT} or {EXPERIENCES}; expected a run's folder, "
                         f"<checkpoint dir>/<project>/<name>")
    if args.model is None or not (args.model / "config.json").is_file():
        raise InputError(f"MODEL {args.model or ''}: no config.json; expected a model folder (MODEL is needed "
                         f"unless --report-only)")
    steps = episodes(args.run, first, last)
    shapes = calls(steps)
    if not shapes:
        raise InputError(f"--steps {first}:{last}: the run kept no experience of those explore steps")
    result = {"steps": f"{first}:{last}", "requests": len(shapes), "prompt_tokens": sum(p for p, _ in shapes),
              "reply_tokens": sum(r for _, r in shapes), "compilation_config": compilation(args.run),
              **explorer_seconds(args.run, first, last)}
    if args.served:  # first: the server's process is gone, and its memory free, before the offline engine starts
        print(f"replaying {len(shapes)} requests through vllm serve, turn by turn and episode by episode ...",
              flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        result.update(server_seconds(args.model, steps, args.temperature, args.memory, args.out / "serve.log",
                                     result["compilation_config"]))
    print(f"replaying {len(shapes)} requests on vLLM, all at once and turn by turn ...", flush=True)
    result.update(engine_seconds(args.model, steps, args.temperature, args.memory, result["compilation_config"]))
    write(args.out, result)
    return 0


def write(out: Path, result: dict) -> None:
    """engine_ceiling.json and engine_ceiling.md in `out`, both or neither, and the table printed."""
    text = table(result)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_paths(out / "engine_ceiling.json", out / "engine_ceiling.md") as (js, md):
        js.write_text(json.dumps(result, indent=1), encoding="utf-8")
        md.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
