"""A chat model that times its calls, so that a workflow can say how much of an episode the model took.

Trinity-RFT times each rollout as a whole (`rollout/time/run_execution`). The examples' workflows wrap their
model in `TimedModel` and report `model_seconds` (the episode's model calls: the engine's generation, the HTTP
round trip and agentscope's parsing) and `model_calls`; Trinity logs them as `rollout/model_seconds/mean` and
`rollout/model_calls/mean`. The rest of a rollout is the workflow's own: the environment, the tools, the agent.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from agentscope.model import ChatModelBase

METRICS = ("model_seconds", "model_calls")


class TimedModel(ChatModelBase):
    """`model`'s answers, unchanged, with the seconds and the number of its calls counted; a streamed answer is
    timed until its last chunk, the caller's own time between chunks included."""

    def __init__(self, model: ChatModelBase):
        super().__init__(model_name=model.model_name, stream=model.stream)
        self.model = model
        self.seconds = 0.0
        self.calls = 0

    async def __call__(self, *args, **kwargs):
        self.calls += 1
        started = time.perf_counter()
        try:
            answer = await self.model(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started
        return self._timed_stream(answer) if isinstance(answer, AsyncGenerator) else answer

    async def _timed_stream(self, chunks: AsyncGenerator):
        started = time.perf_counter()
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            self.seconds += time.perf_counter() - started

    def metrics(self) -> dict[str, float]:
        """The workflow's metrics for these calls, by the names in METRICS."""
        return dict(zip(METRICS, (self.seconds, float(self.calls))))
