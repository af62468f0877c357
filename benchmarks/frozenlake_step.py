"""Harness cost per environment step: run_frozen_lake with a zero-latency model, beside a raw Gymnasium step.

The oracle policy answers instantly, so the time per step of run_frozen_lake is
what the agent, prompt building, parsing and wrapper add around the model call.

    python benchmarks/frozenlake_step.py
"""

import asyncio
import random
import time

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv

from frozenlake.data import draw_tasks
from frozenlake.env import FrozenLakeEnv
from frozenlake.maps import generate_map
from frozenlake.policies import OracleModel
from frozenlake.workflow import run_frozen_lake
from rftkit.cli import ArgumentParser, at_least


def per_step_us(total_seconds: float, steps: int) -> float:
    return 1e6 * total_seconds / steps


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=at_least(1), default=300, help="oracle episodes on solvable maps")
    episodes = parser.parse_args(argv).episodes
    tasks, _ = draw_tasks(episodes, 6, 8, np.random.default_rng(0), progress=False)

    async def play_all():
        outputs = []
        for task in tasks:
            outputs.append(await run_frozen_lake(task, OracleModel(), {}))
        return outputs

    start = time.perf_counter()
    outputs = asyncio.run(play_all())
    workflow_time = time.perf_counter() - start
    workflow_steps = int(sum(out.metrics["env_steps"] for out in outputs))

    rng = random.Random(0)
    wrapper_steps = gym_steps = 0
    wrapper_time = gym_time = 0.0
    for task in tasks:
        desc = generate_map(task["size"], task["p"], task["seed"])
        env = FrozenLakeEnv(max_steps=8)
        env.reset({"desc": desc})
        gym = GymFrozenLakeEnv(desc=desc, is_slippery=False)
        gym.reset(seed=0)
        actions = [rng.randrange(4) for _ in range(8)]
        start = time.perf_counter()
        for action in actions:
            _, _, terminated, _, _ = gym.step(action)
            gym_steps += 1
            if terminated:
                break
        gym_time += time.perf_counter() - start
        start = time.perf_counter()
        for action in actions:
            _, _, done, _ = env.step(("Left", "Down", "Right", "Up")[action])
            wrapper_steps += 1
            if done:
                break
        wrapper_time += time.perf_counter() - start

    print(f"episodes {episodes}, oracle success {sum(o.reward for o in outputs) / episodes:.2f}")
    print(f"raw Gymnasium FrozenLakeEnv.step      {per_step_us(gym_time, gym_steps):9.1f} us/step")
    print(f"frozenlake.env.FrozenLakeEnv.step     {per_step_us(wrapper_time, wrapper_steps):9.1f} us/step "
          f"(with render)")
    print(f"run_frozen_lake, zero-latency model   {per_step_us(workflow_time, workflow_steps):9.1f} us/step "
          f"(agent, prompt, parse, env)")


if __name__ == "__main__":
    main()
