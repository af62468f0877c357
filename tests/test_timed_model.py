"""rftkit.timed_model: a workflow's model calls, counted and timed, answers unchanged, streamed or not."""

import asyncio

import pytest
from agentscope.message import TextBlock
from agentscope.model import ChatModelBase, ChatResponse

from rftkit.timed_model import TimedModel

PAUSE_S = 0.05


class SlowModel(ChatModelBase):
    """A test model that answers after PAUSE_S, or streams three chunks PAUSE_S apart, or fails."""

    def __init__(self, stream: bool = False, fail: bool = False):
        super().__init__(model_name="slow", stream=stream)
        self.fail = fail

    async def __call__(self, messages, **kwargs):
        if not self.stream:
            await asyncio.sleep(PAUSE_S)
            if self.fail:
                raise ConnectionError("the engine went away")
            return ChatResponse(content=[TextBlock(type="text", text="done")])

        async def chunks():
            for index in range(3):
                await asyncio.sleep(PAUSE_S)
                yield ChatResponse(content=[TextBlock(type="text", text=str(index))])
        return chunks()


def test_calls_are_counted_and_timed_and_answers_pass_through():
    model = TimedModel(SlowModel())

    async def two_calls():
        return [await model([{"role": "user", "content": "hi"}]) for _ in range(2)]

    answers = asyncio.run(two_calls())
    assert [answer.content[0]["text"] for answer in answers] == ["done", "done"]
    assert model.metrics()["model_calls"] == 2.0 and 2 * PAUSE_S <= model.metrics()["model_seconds"] < 1


def test_a_streamed_answer_is_timed_until_its_last_chunk():
    model = TimedModel(SlowModel(stream=True))
    assert model.stream

    async def read_all():
        return [chunk.content[0]["text"] async for chunk in await model([])]

    assert asyncio.run(read_all()) == ["0", "1", "2"]
    assert model.calls == 1 and model.seconds >= 3 * PAUSE_S


def test_a_failed_call_still_counts():
    model = TimedModel(SlowModel(fail=True))
    with pytest.raises(ConnectionError):
        asyncio.run(model([]))
    assert model.calls == 1 and model.seconds >= PAUSE_S
