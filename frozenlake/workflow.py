"""`run_frozen_lake`: one episode of agent and environment, as a tuner workflow."""

from __future__ import annotations

import re

from agentscope.message import Msg
from agentscope.model import ChatModelBase
from agentscope.tuner import WorkflowOutput

from frozenlake.agent import FrozenLakeAgent
from frozenlake.env import FrozenLakeEnv, moves_allowed
from rftkit.timed_model import TimedModel

END_LINE = "Episode ended: "


def end_reason(response_text: str) -> str | None:
    """Why an episode ended ("goal", "hole", "max_steps", "model_error"), read from its response."""
    match = re.search(rf"^{END_LINE}(\w+)", response_text or "", re.MULTILINE)
    return match.group(1) if match else None


async def run_frozen_lake(
    task: dict,
    model: ChatModelBase,
    auxiliary_models: dict[str, ChatModelBase] | None = None,
) -> WorkflowOutput:
    """Play the map `task` describes (seed, size, p; optional agent_max_steps, the moves allowed) with `model`.

    The reward is the environment's: 1.0 on the goal, else 0.0. If the model
    call fails, the episode ends there with reward 0.0 and reason
    "model_error", so one bad request costs one rollout, not the training step.
    """
    max_steps = moves_allowed(task)
    env = FrozenLakeEnv(max_steps=max_steps)
    model = TimedModel(model)
    agent = FrozenLakeAgent(model=model, max_steps=max_steps)
    observation, _ = env.reset(task)
    reward, invalid_actions, error = 0.0, 0, None

    while not env.done:
        prompt = Msg("user", agent.get_prompt(observation), role="user")
        try:
            reply = await agent.reply(prompt)
        except Exception as exc:  # noqa: BLE001 - any model failure ends this episode only
            error = f"{type(exc).__name__}: {exc}"
            break
        action = agent.get_action(reply)
        observation, step_reward, _, _ = env.step(action)
        agent.update_state(action, observation)
        reward += step_reward
        invalid_actions += action is None

    reason = env.reason or "model_error"
    if error:
        reward = 0.0
    summary = (f"Final observation:\n{observation}\n"
               f"Reward: {reward}\nSteps: {env.steps} of {max_steps}\n"
               f"{END_LINE}{reason}" + (f" ({error})" if error else ""))
    return WorkflowOutput(
        reward=reward,
        response=Msg("assistant", summary, role="assistant"),
        metrics={
            "env_steps": float(env.steps),
            "env_done": float(env.done),
            "success": float(reason == "goal"),
            "invalid_actions": float(invalid_actions),
            "model_error": float(error is not None),
            **model.metrics(),
        },
    )
