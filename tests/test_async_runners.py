"""The shipped FrozenLake config's runners: Trinity's real WorkflowRunner, in the config's asynchronous mode,
plays its share of a map's rollouts at once, and each episode's experiences stay its own."""

import asyncio
import itertools
import time

from frozenlake.policies import OracleModel, grid_from_prompt, last_user_text
from frozenlake.workflow import run_frozen_lake
from rftkit import cluster
from rftkit.overrides import load_yaml, resolve_config
from rftkit.trinity_config import validate
from standins.fake_vllm_server import FakeVLLMServer

from conftest import REPO

MAP = {"seed": 3, "size": 6, "p": 0.7, "env_max_steps": 8}


def shipped_config(tmp_path):
    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    return validate(cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path)}),
                                      cluster.plan_cluster(1, 1, 1, None)),
                    run_frozen_lake)


async def run_one_share(config, url: str, monkeypatch):
    """What one runner does with its share of a map's rollouts: (status, experiences)."""
    import trinity.explorer.workflow_runner as workflow_runner
    from trinity.common.config import GenerationConfig
    from trinity.common.experience import Experience
    from trinity.common.models.model import ModelWrapper
    from trinity.common.workflows import WORKFLOWS
    from trinity.common.workflows.workflow import Task

    rollout = config.explorer.rollout_model
    wrapper = ModelWrapper(config=rollout.__class__(**{**vars(rollout), "engine_type": "external"}), api_address=url)

    class EngineActor:  # stands for the engine's Ray handle, of which the runner asks only the weights' version
        class get_model_version:
            @staticmethod
            async def remote():
                return 0

    wrapper.model = EngineActor()

    class OneEngine:  # stands for the Ray engine actors that Trinity's Allocator looks up
        def __init__(self, explorer_config):
            pass

        def get_model(self, *args):
            return wrapper

    monkeypatch.setattr(workflow_runner, "Allocator", OneEngine)
    runner = workflow_runner.WorkflowRunner(config, rollout_model_id=0, runner_id=0)
    await runner.prepare()
    task = Task(workflow=WORKFLOWS.get("agentscope_workflow_adapter_v1"), raw_task=MAP,
                workflow_args={"workflow_func": run_frozen_lake},
                rollout_args=GenerationConfig(temperature=1.0, top_p=1.0, max_tokens=64, logprobs=0),
                index={"taskset_id": 0, "index": 0}, batch_id=0, task_id=0)
    share = config.explorer.max_repeat_times_per_runner
    status, payload = await runner.run_task(task, batch_id="0", repeat_times=share)
    return status, Experience.deserialize_many(payload)


def test_a_runner_plays_its_rollouts_at_once_and_each_keeps_its_own_experiences(tmp_path, monkeypatch):
    config = shipped_config(tmp_path)
    share = config.explorer.max_repeat_times_per_runner
    assert config.explorer.concurrent_mode == "asynchronous" and share == 4
    calls = itertools.count()

    async def reply(body):  # every third answer is no move, so the episodes' lengths differ
        call = next(calls)
        if call == 0:  # hold the first answer until every episode has asked, or 30 s have passed
            deadline = time.monotonic() + 30
            while len(server.requests) < share and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if call % 3 == 2:
            return "I am not sure."
        return f"```{OracleModel().choose(grid_from_prompt(last_user_text(body['messages'])))}```"

    with FakeVLLMServer(reply) as server:
        status, experiences = asyncio.run(run_one_share(config, server.url, monkeypatch))
    assert status.completed_runs == share and not status.message
    # at once: the first requests are every episode's first move, the map as it starts (one after another,
    # the held first answer would have timed out and its move changed the next request's map)
    assert len({last_user_text(body["messages"]) for body in server.requests[:share]}) == 1
    runs = {}
    for experience in experiences:
        runs.setdefault(experience.eid.run, []).append(experience)
    assert sorted(runs) == list(range(share))
    assert sum(len(r) for r in runs.values()) == len(server.requests)  # one experience per model call, none shared
    for run in runs.values():
        metrics = run[-1].metrics
        assert {e.reward for e in run} == {1.0} and metrics["success"] == 1.0
        assert len(run) == metrics["env_steps"]  # this episode's own calls, a step each (a non-move too)

