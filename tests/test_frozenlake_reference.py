"""The reference pass rates' dynamic programme against Monte Carlo rollouts in the real environment."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from frozenlake.env import AGENT_MAX_STEPS, FrozenLakeEnv
from frozenlake.maps import ACTIONS, generate_map, shortest_path_length
from frozenlake.reference import (STRONG, WEAK, pass_rate, policy_table, reference_pass_rates, safe_walk_pass_rate,
                                  transitions)

EPISODES = 3000


def monte_carlo(desc, probs, max_steps, rng, is_slippery=False):
    env = FrozenLakeEnv(max_steps=max_steps, is_slippery=is_slippery)
    wins = 0
    for episode in range(EPISODES):
        env.reset({"desc": desc, "seed": episode, "is_slippery": is_slippery})
        while not env.done:
            _, reward, _, _ = env.step(ACTIONS[rng.choice(4, p=probs[env.s])])
        wins += reward == 1.0
    return wins / EPISODES


MAPS = [(3, 0.7, 1), (4, 0.8, 7), (5, 0.75, 3), (6, 0.85, 11), (6, 0.65, 5)]


@pytest.mark.parametrize("size,p,seed", MAPS)
@pytest.mark.parametrize("policy", ["random", "noisy_oracle", "safe"])
def test_dynamic_programme_matches_rollouts(size, p, seed, policy):
    desc = generate_map(size, p, seed)
    probs = policy_table(desc, policy)
    exact = pass_rate(transitions(desc), probs, max_steps=8)
    estimate = monte_carlo(desc, probs, 8, np.random.default_rng(seed))
    tolerance = 4 * np.sqrt(max(exact * (1 - exact), 1e-4) / EPISODES)
    assert abs(estimate - exact) < tolerance, (desc, policy, exact, estimate)


def test_dynamic_programme_matches_rollouts_on_slippery_ice():
    desc = generate_map(4, 0.8, 7)
    probs = policy_table(desc, "noisy_oracle")
    exact = pass_rate(transitions(desc, is_slippery=True), probs, max_steps=8)
    estimate = monte_carlo(desc, probs, 8, np.random.default_rng(0), is_slippery=True)
    assert abs(estimate - exact) < 4 * np.sqrt(exact * (1 - exact) / EPISODES)


def test_a_noiseless_oracle_always_succeeds_within_the_budget():
    for seed in range(50):
        desc = generate_map(5, 0.75, seed)
        length = shortest_path_length(desc)
        if length is None:
            continue
        model = transitions(desc)
        probs = policy_table(desc, "noisy_oracle", epsilon=0.0)
        assert pass_rate(model, probs, max_steps=length) == pytest.approx(1.0)
        if length > 1:
            assert pass_rate(model, probs, max_steps=length - 1) == 0.0


def test_dataset_carries_both_features_for_an_episodes_moves(frozenlake_data):
    rows = pq.read_table(frozenlake_data / "train.parquet").to_pylist()[:50]
    for row in rows:
        expected = reference_pass_rates(generate_map(row["size"], row["p"], row["seed"]), AGENT_MAX_STEPS)
        assert row[WEAK] == pytest.approx(expected[WEAK]) and row[STRONG] == pytest.approx(expected[STRONG])
        assert 0.0 < row[WEAK] <= 1.0 and 0.0 < row[STRONG] <= 1.0  # every kept map is solvable
    assert np.mean([r[STRONG] for r in rows]) > np.mean([r[WEAK] for r in rows])


def test_the_safe_walk_never_steps_off_the_grid_or_into_a_hole():
    desc = ["SF", "HG"]  # from S only Right is safe; from its right, Left or Down (the goal), one in two
    probs = policy_table(desc, "safe")
    assert probs[0].tolist() == [0, 0, 1, 0] and probs[1].tolist() == [0.5, 0.5, 0, 0]
    # a try at the goal on every second move: 5 in 10 moves, each one in two
    assert pass_rate(transitions(desc), probs, 10) == pytest.approx(1 - 0.5 ** 5)
    assert pass_rate(transitions(desc), policy_table(desc, "random"), 10) < 0.5
    for size, p, seed in MAPS:
        task = {"size": size, "p": p, "seed": seed}
        desc = generate_map(size, p, seed)
        assert safe_walk_pass_rate(task) == pytest.approx(
            pass_rate(transitions(desc), policy_table(desc, "safe"), AGENT_MAX_STEPS))
        assert safe_walk_pass_rate({**task, "agent_max_steps": 2}) <= safe_walk_pass_rate(task)
