"""Running a workflow over a split for evaluation: concurrency, transcripts, failures, intervals.

Every episode is played by the project's own workflow with a `TranscriptModel`
around the chat model, so the report sees each prompt and reply. A model that
raises or times out is recorded on its episode, which scores 0; the run goes on.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, Awaitable, Callable

from agentscope.model import ChatModelBase, ChatResponse, OpenAIChatModel
from tqdm import tqdm

from rftkit.files import packed_or_plain


def response_text(response: ChatResponse) -> str:
    return "".join(block.get("text", "") for block in response.content if block.get("type") == "text")


def message_text(message: dict) -> str:
    """The text of one OpenAI-format chat message, whose content is a string or a list of blocks."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(block.get("text", "") for block in content if isinstance(block, dict))
    return str(content or "")


class TranscriptModel(ChatModelBase):
    """Delegates to `inner` and records every (prompt, reply) pair in `turns`."""

    def __init__(self, inner: ChatModelBase):
        super().__init__(model_name=inner.model_name, stream=False)
        self.inner = inner
        self.turns: list[dict[str, str]] = []

    async def __call__(self, messages: list[dict], *args, **kwargs) -> ChatResponse:
        result = await self.inner(messages, *args, **kwargs)
        if isinstance(result, AsyncGenerator):  # a streaming model: its last chunk holds the whole reply
            async for chunk in result:
                last = chunk
            result = last
        prompt = message_text(messages[-1]) if messages else ""
        self.turns.append({"prompt": prompt, "reply": response_text(result)})
        return result


async def close_client(model: ChatModelBase) -> None:
    """Close the HTTP client an API model holds (agentscope's OpenAI model: `client`) while the event loop
    runs; left to the garbage collector, it is closed after the loop, with an error printed for each."""
    client = getattr(model, "client", None)
    if client is not None and hasattr(client, "close"):
        await client.close()


def wilson_interval(successes: float, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate (sensible at 0 and 1, unlike the normal one)."""
    if trials == 0:
        return 0.0, 0.0
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    # The interval holds the rate; rounding can put a bound a hair on the wrong side (1 - 1e-16 at 100/100).
    return max(0.0, min(rate, centre - half)), min(1.0, max(rate, centre + half))


def rate(successes: float, trials: int) -> dict:
    """A success rate with its 95% Wilson interval and its number of trials."""
    low, high = wilson_interval(successes, trials)
    return {"rate": successes / trials if trials else 0.0, "ci95": [low, high], "n": trials}


def episodes_file(folder: Path) -> Path:
    """An evaluation folder's episodes: `episodes.jsonl` as scripts/evaluate.py writes it, or `episodes.jsonl.gz`
    where a kept record was compressed (a tenth of the size: the records under docs/ travel with every GPU call)."""
    return packed_or_plain(folder / "episodes.jsonl")


SEEN = "seen_in_training"  # an episode's flag, where evaluate.py compared its task with the training split


def by_training(episodes: list[dict], won: Callable[[dict], bool], expected: str | None = None,
                expected_of: Callable[[dict], float] | None = None) -> dict | None:
    """Success on the tasks the training split lacks ("unseen") and on those it holds ("seen"): each a `rate`
    with its task count and, given `expected`, a task column holding a baseline's expected success, that
    column's mean over the same episodes (`expected_of(task)` where given: the value for a split without the
    column). None when the episodes were not compared with a training split."""
    if not episodes or any(e.get(SEEN) is None for e in episodes):
        return None
    value = expected_of or (lambda task: task[expected])
    groups = {}
    for name, seen in (("unseen", False), ("seen", True)):
        group = [e for e in episodes if e[SEEN] is seen]
        if group:
            groups[name] = {**rate(sum(map(won, group)), len(group)), "tasks": len({e["task_number"] for e in group})}
            if expected:
                groups[name][expected] = sum(value(e["task"]) for e in group) / len(group)
    return groups


def by_training_rows(groups: dict | None, what: str, expected: str | None = None, label: str = "") -> list[str]:
    """report.md's table of `by_training` (`what`: the rate's name; `label`: the expected column's), or a line
    saying that the tasks were not compared with a training split."""
    if groups is None:
        return ["", f"Not compared with a training split (none beside the evaluated one): {what} includes any "
                    f"task that training saw."]
    head = f"| tasks | number | episodes | {what} (95% CI) |" + (f" {label} |" if expected else "")
    lines = ["", head, "|---|---|---|---|" + ("---|" if expected else "")]
    for name, g in groups.items():
        cell = f" {g[expected]:.3f} |" if expected else ""
        where = "not in" if name == "unseen" else "in"
        lines.append(f"| {where} the training split | {g['tasks']} | {g['n']} | {g['rate']:.3f} "
                     f"({g['ci95'][0]:.3f}-{g['ci95'][1]:.3f}) |{cell}")
    return lines


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: how likely a split at least this uneven is if wins and losses were
    equally likely (ties left out). For paired comparisons, such as the same maps before and after training."""
    trials = wins + losses
    if trials == 0:
        return 1.0
    tail = sum(math.comb(trials, k) for k in range(min(wins, losses) + 1)) / 2 ** trials
    return min(1.0, 2 * tail)


def task_by_task(first: dict, second: dict) -> tuple[int, int, int]:
    """Tasks on which the second evaluation scored higher, lower and the same as the first, from each
    evaluation's score per task (the input of a paired sign test). ValueError if they scored different tasks."""
    if first.keys() != second.keys():
        raise ValueError("the two evaluations did not play the same tasks")
    better = sum(second[task] > first[task] for task in first)
    worse = sum(second[task] < first[task] for task in first)
    return better, worse, len(first) - better - worse


async def run_episodes(
    tasks: list[dict],
    play: Callable[[dict, ChatModelBase], Awaitable[dict[str, Any]]],
    make_model: Callable[[int], ChatModelBase],
    repeats: int = 1,
    concurrency: int = 4,
    timeout: float = 600.0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Play every task `repeats` times, `concurrency` at once; one record per episode, in task order.

    `make_model(episode_number)` gives each episode its own model (a seeded
    policy can seed from the number, so results do not depend on scheduling).
    `play(task, model)` returns the episode's fields (at least `reward`). An
    exception or a timeout becomes `{"reward": 0.0, "error": ...}` instead. `progress`: a progress bar.
    """
    limit = asyncio.Semaphore(concurrency)
    jobs = [(i, task, r) for i, task in enumerate(tasks) for r in range(repeats)]

    async def one(episode_number: int, task_number: int, task: dict, repeat: int) -> dict[str, Any]:
        async with limit:
            model = TranscriptModel(make_model(episode_number))
            record: dict[str, Any] = {"task_number": task_number, "repeat": repeat, "task": task}
            try:
                record.update(await asyncio.wait_for(play(task, model), timeout))
                record["error"] = None
            except asyncio.TimeoutError:
                record.update(reward=0.0, error=f"timeout after {timeout:g} s")
            except Exception as exc:  # noqa: BLE001 - recorded on the episode; the run goes on
                record.update(reward=0.0, error=f"{type(exc).__name__}: {exc}")
            finally:
                await close_client(model.inner)
            record["turns"] = model.turns
            return record

    records = []
    with tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress) as bar:
        for finished in asyncio.as_completed([one(n, *job) for n, job in enumerate(jobs)]):
            records.append(await finished)
            bar.update()
    return sorted(records, key=lambda r: (r["task_number"], r["repeat"]))


CALLS_PER_EPISODE_MAX = 1000  # seeds of one episode's calls stay apart from the next episode's


class SeedPerCallModel(OpenAIChatModel):
    """agentscope's OpenAI chat model that sends a new sampling seed with every call: seed, seed + 1, ...

    Servers that honour `seed` (vLLM, llama.cpp) then repeat a run exactly. One seed for a whole
    episode would not do: a seeded server draws the same random numbers for every call, so each move
    samples at the same points of similar distributions and the model repeats one action."""

    def __init__(self, seed: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.next_seed = seed

    async def __call__(self, *args, **kwargs):
        kwargs.setdefault("seed", self.next_seed)
        self.next_seed += 1
        return await super().__call__(*args, **kwargs)
