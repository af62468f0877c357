"""Exact pass rates of two fixed reference policies on a map: BOTS's difficulty features for FrozenLake.

BOTS interpolates each task's pass rate between a weak and a strong reference.
For math those are measured pass rates of two LLMs; for FrozenLake they can be
computed exactly, because an episode is a small finite-horizon Markov chain:

* weak, `random_pass_rate`: each move uniformly at random;
* strong, `noisy_oracle_pass_rate`: a shortest-path move, except that with
  probability `EPSILON` the move is uniformly random instead.

A third policy is no feature but a baseline for reports, `safe`: a random walk
that reads the four tiles around it and moves uniformly among those on the grid
that are not holes (uniformly among all four where every one is). It needs no
route, only the local view, so it marks what an agent gains without planning.

The pass rate is the probability of reaching G within `max_steps` moves, by
backward induction over Gymnasium's own transition table:
V_0 = 0 and V_{t+1}(s) = sum_a pi(a|s) sum_{s'} P(s'|s,a) [1 if s' is G, 0 if s' is a hole, else V_t(s')].
"""

from __future__ import annotations

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv

from frozenlake.env import moves_allowed
from frozenlake.maps import ACTIONS, distances_to_goal, neighbours, optimal_action, task_map

WEAK, STRONG = "random_pass_rate", "noisy_oracle_pass_rate"
EPSILON = 0.3


def policy_table(desc: list[str], policy: str, epsilon: float = EPSILON) -> np.ndarray:
    """pi(a|s) as an array [cells, 4], for policy "random", "noisy_oracle" or "safe"."""
    ncol = len(desc[0])
    probs = np.full((len(desc) * ncol, len(ACTIONS)), 1.0 / len(ACTIONS))
    if policy == "random":
        return probs
    if policy == "safe":
        for r, row in enumerate(desc):
            for c in range(ncol):
                safe = [ACTIONS.index(a) for a, (nr, nc) in neighbours(desc, (r, c)) if desc[nr][nc] != "H"]
                if safe:
                    probs[r * ncol + c] = 0.0
                    probs[r * ncol + c, safe] = 1.0 / len(safe)
        return probs
    if policy != "noisy_oracle":
        raise ValueError(f"unknown reference policy {policy!r}")
    distance = distances_to_goal(desc)
    for cell in distance:
        action = optimal_action(desc, distance, cell)
        if action is not None:  # cells with no route (and G itself) stay uniform
            state = cell[0] * ncol + cell[1]
            probs[state] *= epsilon
            probs[state, ACTIONS.index(action)] += 1.0 - epsilon
    return probs


def transitions(desc: list[str], is_slippery: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
    """From Gymnasium's table P: (P(land on G | s, a) [S, 4], P(land on ice s' | s, a) [S, 4, S], start state)."""
    env = GymFrozenLakeEnv(desc=desc, is_slippery=is_slippery)
    n_states = env.observation_space.n
    to_goal = np.zeros((n_states, len(ACTIONS)))
    to_ice = np.zeros((n_states, len(ACTIONS), n_states))
    for s in range(n_states):
        for a in range(len(ACTIONS)):
            for p, nxt, reward, terminated in env.P[s][a]:
                if terminated:
                    to_goal[s, a] += p * reward  # reward is 1 on G, 0 in a hole
                else:
                    to_ice[s, a, nxt] += p
    return to_goal, to_ice, int(env.reset(seed=0)[0])


def pass_rate(model: tuple[np.ndarray, np.ndarray, int], probs: np.ndarray, max_steps: int) -> float:
    """Probability that the policy `probs` reaches G from S within `max_steps` moves."""
    to_goal, to_ice, start = model
    goal_now = (probs * to_goal).sum(axis=1)
    go_on = np.einsum("sa,sat->st", probs, to_ice)
    value = np.zeros(len(goal_now))
    for _ in range(max_steps):
        value = goal_now + go_on @ value
    return float(value[start])


def reference_pass_rates(desc: list[str], max_steps: int) -> dict[str, float]:
    """Both features for one non-slippery map."""
    model = transitions(desc)
    return {WEAK: pass_rate(model, policy_table(desc, "random"), max_steps),
            STRONG: pass_rate(model, policy_table(desc, "noisy_oracle"), max_steps)}


def safe_walk_pass_rate(task: dict) -> float:
    """The `safe` walk's pass rate on a task's map (`task_map`), in the moves its episode allows."""
    desc = task_map(task)
    return pass_rate(transitions(desc), policy_table(desc, "safe"), moves_allowed(task))
