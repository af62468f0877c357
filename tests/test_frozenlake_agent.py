"""The agent's parsing and prompt, and run_frozen_lake with deterministic chat models."""

import asyncio

import pyarrow.parquet as pq
from agentscope.message import Msg
from hypothesis import given
from hypothesis import strategies as st

from frozenlake.agent import SYSTEM_PROMPT, FrozenLakeAgent
from frozenlake.maps import ACTIONS
from frozenlake.policies import OracleModel, RandomModel
from frozenlake.workflow import run_frozen_lake

from scripted_model import ScriptedModel

get_action = FrozenLakeAgent.get_action


def test_get_action_reads_the_last_fenced_block():
    assert get_action("Let's take the action ```Left```.") == "Left"
    assert get_action("```up``` no wait ``` Down ```") == "Down"
    assert get_action("`right`") == "Right"
    assert get_action("``LEFT``") == "Left"
    assert get_action("```\nUp\n```") == "Up"
    assert get_action("I would go ```Left``` but the last block is ```print(1)```") is None
    assert get_action("Right") is None  # no backticks: not an answer
    assert get_action(Msg("agent", "go ```Down```", "assistant")) == "Down"
    assert get_action(None) is None


@given(st.text())
def test_get_action_never_raises(text):
    assert get_action(text) in (*ACTIONS, None)
    assert get_action(Msg("agent", text, "assistant")) in (*ACTIONS, None)


@given(st.text(alphabet=st.characters(blacklist_characters="`")), st.sampled_from(ACTIONS),
       st.integers(1, 3), st.sampled_from(["", " ", "\n"]))
def test_get_action_finds_a_fenced_move_after_any_text(prefix, action, ticks, pad):
    fence = "`" * ticks
    assert get_action(f"{prefix}{fence}{pad}{action.lower()}{pad}{fence}") == action


def test_system_prompt_matches_the_environment():
    prompt = SYSTEM_PROMPT.format(max_steps=8)
    assert "not slippery" in prompt and "Qwen" not in prompt
    assert "at most 8 moves" in prompt


def test_prompt_reports_what_the_last_move_did():
    agent = FrozenLakeAgent(model=OracleModel(), max_steps=8)
    first = agent.get_prompt("P _\n_ G")
    assert "Move 1 of 8" in first and "P _\n_ G" in first
    agent.update_state("Up", "P _\n_ G")
    assert "did not move" in agent.get_prompt("P _\n_ G")
    agent.update_state(None, "P _\n_ G")
    assert "no valid move" in agent.get_prompt("P _\n_ G")
    agent.update_state("Right", "_ P\n_ G")
    prompt = agent.get_prompt("_ P\n_ G")
    assert "Move 4 of 8" in prompt and "last move was Right." in prompt
    agent.reset()
    assert agent.steps_taken == 0 and agent.last_action is None


def test_oracle_reaches_the_goal_on_every_test_map(frozenlake_data):
    async def play_all(tasks):
        return await asyncio.gather(*(run_frozen_lake(task, OracleModel(), {}) for task in tasks))

    tasks = pq.read_table(frozenlake_data / "test.parquet").to_pylist()
    outputs = asyncio.run(play_all(tasks))
    for task, out in zip(tasks, outputs):
        assert out.reward == 1.0, task
        assert out.metrics["success"] == 1.0 and out.metrics["invalid_actions"] == 0.0
        assert out.metrics["env_steps"] == task["shortest_path_length"]
        assert "Episode ended: goal" in out.response.get_text_content()


def test_random_policy_scores_below_the_oracle(frozenlake_data):
    tasks = pq.read_table(frozenlake_data / "test.parquet").to_pylist()
    rewards = [asyncio.run(run_frozen_lake(t, RandomModel(seed=i), {})).reward for i, t in enumerate(tasks)]
    assert 0.0 < sum(rewards) / len(rewards) < 0.8


def test_invalid_replies_use_up_the_budget_of_ten_moves_as_upstream():
    model = ScriptedModel(["I am not sure."] * 10)
    out = asyncio.run(run_frozen_lake({"seed": 1, "size": 4, "p": 0.8}, model, {}))
    assert out.reward == 0.0 and model.calls == 10  # upstream's agent_max_steps
    seconds = out.metrics.pop("model_seconds")
    assert out.metrics == {"env_steps": 10.0, "env_done": 1.0, "success": 0.0,
                           "invalid_actions": 10.0, "model_error": 0.0, "model_calls": 10.0}
    assert 0 < seconds < 5  # rftkit.timed_model's: the scripted model's ten calls, timed
    assert "Episode ended: max_steps" in out.response.get_text_content()
    assert "at most 10 moves" in model.prompts[0][0]["content"][0]["text"]


def test_a_task_may_set_its_own_move_budget():
    model = ScriptedModel(["I am not sure."] * 3)
    out = asyncio.run(run_frozen_lake({"seed": 1, "size": 4, "p": 0.8, "agent_max_steps": 3}, model, {}))
    assert model.calls == 3 and out.metrics["env_steps"] == 3.0 and out.metrics["env_done"] == 1.0


def test_a_null_move_budget_is_the_default_one():
    """A split where some rows set agent_max_steps has it null in the others: those play upstream's 10 moves."""
    model = ScriptedModel(["I am not sure."] * 10)
    out = asyncio.run(run_frozen_lake({"seed": 1, "size": 4, "p": 0.8, "agent_max_steps": None}, model, {}))
    assert model.calls == 10 and out.metrics["env_steps"] == 10.0


def test_a_model_error_ends_the_episode_without_raising():
    model = ScriptedModel(["```Left```", ConnectionError("engine went away")])
    out = asyncio.run(run_frozen_lake({"desc": ["SFF", "FFF", "FFG"]}, model, {}))
    assert out.reward == 0.0
    assert out.metrics["model_error"] == 1.0 and out.metrics["env_done"] == 0.0 and out.metrics["env_steps"] == 1.0
    text = out.response.get_text_content()
    assert "Episode ended: model_error (ConnectionError: engine went away)" in text


def test_each_move_is_asked_with_its_own_short_context():
    model = ScriptedModel(["```Right```", "```Right```", "```Down```", "```Down```"])
    out = asyncio.run(run_frozen_lake({"desc": ["SFF", "FFF", "FFG"]}, model, {}))
    assert out.reward == 1.0 and out.metrics["env_steps"] == 4.0
    assert [[m["role"] for m in prompt] for prompt in model.prompts] == [["system", "user"]] * 4
    assert "Move 4 of 10" in str(model.prompts[-1][-1]["content"])
