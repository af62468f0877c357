"""A text FrozenLake episode with a step budget, on top of Gymnasium's FrozenLakeEnv.

Rules of one episode:

* The map is `task["desc"]` if given, otherwise `generate_map(size, p, seed)`.
* Actions are the words Left, Down, Right and Up (any letter case, surrounding
  white space ignored). Gymnasium's FrozenLakeEnv moves the player; walking
  into the edge of the map leaves it where it is.
* Anything else is an invalid action: it uses up one step of the budget, the
  player does not move and the reward is 0. Counting it keeps a model that
  never produces a valid action from looping forever, and costs it the step.
* The episode ends on the goal (reward 1.0), in a hole (reward 0.0), or after
  `max_steps` steps (reward 0.0). `info["reason"]` says which. The examples'
  episodes have `AGENT_MAX_STEPS` (10) steps; their maps are solvable within
  `ENV_MAX_STEPS` (8) moves (frozenlake/data.py). Both are upstream's defaults.
* With `is_slippery=True` Gymnasium's slippery dynamics apply, seeded from
  the task's seed; the examples train on non-slippery maps.

Observations are the rendered text grid, one row per line:

    P  player     _  ice (the start tile included)     O  hole     G  goal
    X  player in a hole                                √  player on the goal
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv

from frozenlake.maps import ACTIONS, generate_map

ENV_MAX_STEPS = 8  # a map's shortest route is at most this long (upstream's env_max_steps)
AGENT_MAX_STEPS = 10  # the moves, valid or not, an episode allows (upstream's agent_max_steps)

TILE_SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}
PLAYER_SYMBOLS = {"S": "P", "F": "P", "H": "X", "G": "√"}


def moves_allowed(task: dict) -> int:
    """The moves a task's episode allows: its `agent_max_steps` where the row has one (null is none)."""
    steps = task.get("agent_max_steps")
    return AGENT_MAX_STEPS if steps is None else int(steps)


def normalize_action(action: Any) -> str | None:
    """The canonical action name ("Left", ...) for `action`, or None if it is not one."""
    if not isinstance(action, str):
        return None
    name = action.strip().capitalize()
    return name if name in ACTIONS else None


class FrozenLakeEnv:
    """One FrozenLake episode at a time; see the module docstring for the rules."""

    def __init__(self, max_steps: int = AGENT_MAX_STEPS, desc: list[str] | None = None, is_slippery: bool = False,
                 size: int | None = None, p: float | None = None, seed: int | None = None):
        """With `desc`, or any of size, p and seed (8, 0.8 and 42 where not given), the map is ready at once, as
        in upstream's env; with none of them, `reset(task)` makes the first."""
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.max_steps = max_steps
        self.is_slippery = is_slippery
        self.size = 8 if size is None else size
        self.p = 0.8 if p is None else p
        self.seed = 42 if seed is None else seed
        self.map: list[str] = []
        self.reason: str | None = None
        if desc is not None or (size, p, seed) != (None, None, None):
            self._start(desc if desc is not None else generate_map(self.size, self.p, self.seed))

    def _start(self, desc: list[str]) -> None:
        self.map = [str(row) for row in desc]
        self.gym_env = GymFrozenLakeEnv(desc=self.map, is_slippery=self.is_slippery)
        self.gym_env.reset(seed=int(self.seed))  # seeds the slippery dynamics too
        self.steps = 0
        self.reason: str | None = None

    @property
    def desc(self) -> np.ndarray:
        """Gymnasium's map array (bytes), as `FrozenLakeEnv.desc`."""
        return self.gym_env.desc

    @property
    def s(self) -> int:
        """Gymnasium's state: the player's tile as row * ncol + col."""
        return int(self.gym_env.s)

    @property
    def done(self) -> bool:
        return self.reason is not None

    def tile(self) -> str:
        """The map letter under the player."""
        row, col = divmod(self.s, len(self.map[0]))
        return self.map[row][col]

    def reset(self, task: dict | None = None) -> tuple[str, dict]:
        """Start the episode `task` describes (keys seed, size, p; optional desc, is_slippery)."""
        task = dict(task or {})
        self.seed = int(task.get("seed", self.seed))
        self.size = int(task.get("size", self.size))
        self.p = float(task.get("p", self.p))
        self.is_slippery = bool(task.get("is_slippery", self.is_slippery))
        desc = task.get("desc")
        self._start(list(desc) if desc is not None else generate_map(self.size, self.p, self.seed))
        return self.render(), {"size": len(self.map), "max_steps": self.max_steps}

    def step(self, action: Any) -> tuple[str, float, bool, dict]:
        """Apply one action; returns (observation, reward, done, info)."""
        if not self.map:
            raise RuntimeError("no map yet: call reset(task) before step()")
        if self.done:
            raise RuntimeError("the episode has ended; call reset() before step()")
        self.steps += 1
        name = normalize_action(action)
        info = {"action": name, "action_is_valid": name is not None, "action_is_effective": False}
        reward = 0.0
        if name is not None:
            before = self.s
            _, gym_reward, terminated, _, _ = self.gym_env.step(ACTIONS.index(name))
            reward = float(gym_reward)
            info["action_is_effective"] = self.s != before
            if terminated:
                self.reason = "goal" if self.tile() == "G" else "hole"
        if self.reason is None and self.steps >= self.max_steps:
            self.reason = "max_steps"
        info["reason"] = self.reason
        return self.render(), reward, self.done, info

    def render(self) -> str:
        """The map as text, with the player drawn on its tile."""
        ncol = len(self.map[0])
        player = divmod(self.s, ncol)
        return "\n".join(
            " ".join(PLAYER_SYMBOLS[letter] if (r, c) == player else TILE_SYMBOLS[letter]
                     for c, letter in enumerate(row))
            for r, row in enumerate(self.map)
        )
