"""`run_react_agent`: a ReActAgent with a Python tool answers one math problem in \\boxed{}."""

from __future__ import annotations

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg
from agentscope.model import ChatModelBase
from agentscope.tuner import WorkflowOutput

from math_bots.python_tool import make_toolkit
from rftkit.timed_model import TimedModel

SYSTEM_PROMPT = (
    "You are an agent that solves math problems. You can call the tool execute_python_code to run "
    "Python code for calculations or to check your answer; print what you want to see. "
    "Give your final answer within \\boxed{}."
)

MAX_ITERS = 10


async def run_react_agent(
    task: dict,
    model: ChatModelBase,
    auxiliary_models: dict[str, ChatModelBase] | None = None,
) -> WorkflowOutput:
    """Ask the agent `task["question"]`; the judge scores the reply afterwards.

    The metric `tool_calls` counts the code executions the agent asked for (Trinity logs it as
    rollout/tool_calls/mean); `model_seconds` and `model_calls` are rftkit.timed_model's."""
    model = TimedModel(model)
    agent = ReActAgent(
        name="react_agent",
        sys_prompt=SYSTEM_PROMPT,
        model=model,
        formatter=OpenAIChatFormatter(),
        toolkit=make_toolkit(),
        max_iters=MAX_ITERS,
    )
    agent.set_console_output_enabled(False)
    response = await agent.reply(Msg("user", task["question"], role="user"))
    tool_calls = sum(len(message.get_content_blocks("tool_use")) for message in await agent.memory.get_memory())
    return WorkflowOutput(response=response, metrics={"tool_calls": float(tool_calls), **model.metrics()})
