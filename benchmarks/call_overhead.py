"""Cost of one model call through the training path, against the same request sent straight to the server.

    python benchmarks/call_overhead.py                       # against the test fixture server (CPU)
    python benchmarks/call_overhead.py --base-url http://127.0.0.1:8000 --model-name policy   # vLLM

The training path is what a rollout does for every move: `run_frozen_lake` inside Trinity's
`AgentScopeWorkflowAdapterV1`, whose agentscope OpenAIChatModel calls a Trinity ModelWrapper that
records the call's token ids and logprobs (enable_history), then builds experiences. The direct
path replays the same request bodies, one at a time, with a plain HTTP client. Both run in this
process against the same server, one episode or request at a time; the ratio is the harness's
share. By default the server is `standins/fake_vllm_server.py`, a stand-in that answers in about a
millisecond with vLLM's extra fields, so the difference is the harness alone; with --base-url
(a `vllm serve` of any chat model) the bodies go through a recording proxy in this process,
whose hop (about a millisecond) counts against the training path.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import httpx
import numpy as np
from fastapi import Request

from frozenlake.data import draw_tasks
from frozenlake.workflow import run_frozen_lake
from rftkit.cli import ArgumentParser, at_least
from standins.adapter_harness import run_in_adapter
from standins.fake_vllm_server import FakeVLLMServer


class RecordingProxy(FakeVLLMServer):
    """The fixture server's shape, but each answer comes from a real OpenAI-compatible server."""

    def __init__(self, upstream: str, model_name: str):
        self.client = httpx.Client(base_url=upstream, timeout=600)
        self.model_name = model_name
        super().__init__(reply=None)

    async def _chat(self, request: Request):  # forward the body unchanged (but for the model name), keep a copy
        body = await request.json()
        self.requests.append(body)
        response = await asyncio.to_thread(self.client.post, "/v1/chat/completions",
                                           json={**body, "model": self.model_name})
        return response.json()


def invalid_move(body: dict) -> str:
    """The fixture's reply: a well-formed reply with no move, so every episode makes all 8 calls."""
    return "I am not sure which way to go."


async def full_path(tasks: list[dict], url: str) -> tuple[float, int]:
    """Seconds and model calls for the episodes, one at a time, through the adapter."""
    calls = 0
    start = time.perf_counter()
    for i, task in enumerate(tasks):
        calls += len(await run_in_adapter(run_frozen_lake, task, url, max_tokens=64, task_index=i))
    return time.perf_counter() - start, calls


async def direct_path(bodies: list[dict], url: str, model_name: str) -> float:
    """Seconds for the same requests, one at a time, with a plain HTTP client."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        start = time.perf_counter()
        for body in bodies:
            (await client.post("/v1/chat/completions", json={**body, "model": model_name})).raise_for_status()
        return time.perf_counter() - start


async def measure(tasks: list[dict], server, target: str, model_name: str, rounds: int):
    """Per-call seconds of both paths, `rounds` times each, after a warm-up; in one event loop."""
    await full_path(tasks[:2], server.url)  # warm-up: imports, connections
    full, direct = [], []
    for _ in range(rounds):
        server.requests.clear()
        seconds, calls = await full_path(tasks, server.url)
        bodies = list(server.requests)
        full.append(seconds / calls)
        direct.append(await direct_path(bodies, target, model_name) / len(bodies))
    return full, direct, calls


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=at_least(1), default=30, help="FrozenLake episodes per path and round")
    parser.add_argument("--rounds", type=at_least(1), default=3, help="repeat both paths; the medians are printed")
    parser.add_argument("--base-url", help="a real OpenAI-compatible server (no /v1), e.g. vllm serve "
                                           "(default: the fixture server, standins/fake_vllm_server.py)")
    parser.add_argument("--model-name", default="policy", help="its served model name")
    args = parser.parse_args(argv)

    tasks, _ = draw_tasks(args.episodes, 6, 8, np.random.default_rng(1), progress=False)
    server = RecordingProxy(args.base_url, args.model_name) if args.base_url else FakeVLLMServer(invalid_move)
    with server:
        full, direct, calls = asyncio.run(measure(tasks, server, args.base_url or server.url, args.model_name,
                                                  args.rounds))
    full_ms, direct_ms = 1000 * statistics.median(full), 1000 * statistics.median(direct)
    where = args.base_url or "the fixture server (standins/fake_vllm_server.py)"
    print(f"{args.episodes} FrozenLake episodes x {args.rounds} rounds, {calls} calls a round, against {where}:")
    print(f"  training path (agent, adapter, ModelWrapper with history)  {full_ms:7.1f} ms per call")
    print(f"  the same requests sent directly                            {direct_ms:7.1f} ms per call")
    print(f"  ratio {full_ms / direct_ms:.2f}; harness cost {full_ms - direct_ms:.1f} ms per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
