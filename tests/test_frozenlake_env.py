"""The environment against Gymnasium's own FrozenLakeEnv, and its episode rules."""

import random

import pytest
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv

from frozenlake.env import FrozenLakeEnv
from frozenlake.maps import ACTIONS, generate_map, shortest_path


def test_same_dynamics_as_gymnasium_on_random_actions():
    rng = random.Random(0)
    for episode in range(300):
        size, p, seed = rng.randint(2, 6), rng.uniform(0.6, 0.85), rng.randrange(10**6)
        env = FrozenLakeEnv(max_steps=8)
        env.reset({"seed": seed, "size": size, "p": p})
        gym = GymFrozenLakeEnv(desc=generate_map(size, p, seed), is_slippery=False)
        gym.reset(seed=seed)
        assert env.s == gym.s
        for step in range(1, 9):
            action = rng.choice([*ACTIONS, "jump", None])
            _, reward, done, info = env.step(action)
            if action in ACTIONS:
                state, gym_reward, terminated, _, _ = gym.step(ACTIONS.index(action))
                assert env.s == state and reward == gym_reward
                assert info["action_is_valid"]
                if terminated:
                    assert done and info["reason"] in ("goal", "hole")
                    break
            else:
                assert reward == 0.0 and not info["action_is_valid"] and not info["action_is_effective"]
            assert done == (step == 8), f"episode {episode}: done={done} after {step} of 8 steps"
            if done:
                assert info["reason"] == "max_steps"


def test_max_steps_is_enforced():
    env = FrozenLakeEnv(max_steps=3, desc=["SF", "FG"])
    env.reset({"desc": ["SF", "FG"]})
    for _ in range(3):  # Up from the top row never moves
        obs, reward, done, info = env.step("Up")
        assert not info["action_is_effective"]
    assert done and info["reason"] == "max_steps" and reward == 0.0 and env.steps == 3
    with pytest.raises(RuntimeError, match="reset"):
        env.step("Down")


def test_invalid_action_costs_a_step_and_does_not_move():
    env = FrozenLakeEnv(max_steps=8)
    obs0, _ = env.reset({"desc": ["SFF", "FHF", "FFG"]})
    obs, reward, done, info = env.step("north-east")
    assert obs == obs0 and reward == 0.0 and not done and env.steps == 1
    assert info == {"action": None, "action_is_valid": False, "action_is_effective": False, "reason": None}


def test_render_symbols_and_rewards():
    env = FrozenLakeEnv(max_steps=8)
    obs, info = env.reset({"desc": ["SH", "FG"]})
    assert obs == "P O\n_ G" and info["size"] == 2
    obs, reward, done, info = env.step("right")  # case-insensitive
    assert obs == "_ X\n_ G" and reward == 0.0 and done and info["reason"] == "hole"
    env.reset({"desc": ["SH", "FG"]})
    env.step(" Down ")
    obs, reward, done, info = env.step("RIGHT")
    assert obs == "_ O\n_ √" and reward == 1.0 and done and info["reason"] == "goal"


def test_constructor_keeps_upstream_keywords_and_gymnasium_attributes():
    env = FrozenLakeEnv(max_steps=8, desc=None, is_slippery=False, size=5, p=0.7, seed=11)
    assert env.map == generate_map(5, 0.7, 11)
    assert env.desc.shape == (5, 5) and env.desc.dtype.kind == "S"
    start = next(i for i, letter in enumerate("".join(env.map)) if letter == "S")
    assert env.s == start


def test_reset_is_reproducible_and_slippery_is_seeded():
    task = {"seed": 5, "size": 6, "p": 0.8, "is_slippery": True}
    trajectories = []
    for _ in range(2):
        env = FrozenLakeEnv(max_steps=8)
        env.reset(task)
        states = []
        while not env.done:
            env.step("Right")
            states.append(env.s)
        trajectories.append(states)
    assert trajectories[0] == trajectories[1]


def test_shortest_path_reaches_goal_in_the_real_env():
    for seed in range(200):
        desc = generate_map(6, 0.75, seed)
        path = shortest_path(desc)
        if path is None:
            continue
        env = FrozenLakeEnv(max_steps=len(path))
        env.reset({"desc": desc})
        for action in path:
            _, reward, done, info = env.step(action)
        assert reward == 1.0 and info["reason"] == "goal"


def test_an_env_made_without_a_map_draws_none_until_reset(monkeypatch):
    from frozenlake import env as module

    drawn = []
    monkeypatch.setattr(module, "generate_map", lambda *args: drawn.append(args) or ["SF", "FG"])
    env = FrozenLakeEnv(max_steps=8)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("Right")
    assert drawn == []
    env.reset({"seed": 7, "size": 2, "p": 0.9})
    assert drawn == [(2, 0.9, 7)] and env.render() == "P _\n_ G"


def test_bad_task_values_are_rejected_with_the_field_named():
    env = FrozenLakeEnv()
    with pytest.raises(ValueError, match="size"):
        env.reset({"seed": 1, "size": 1, "p": 0.8})
    with pytest.raises(ValueError, match="p must be"):
        env.reset({"seed": 1, "size": 4, "p": 1.5})
