"""One GPU: the launcher's colocate plan, and the fix that lets Trinity 0.6.0's colocated engine start.

The scheduling test runs Trinity's own Allocator in a real (CPU) Ray cluster that is told it
has one GPU, with the trainer's placement group already holding it, as verl's worker does on
a one-GPU machine. Only the vLLM engine class is a fixture: it records what Ray gave it.
"""

import subprocess
import sys

import pytest
import yaml

from frozenlake import main as frozenlake_main
from rftkit import cluster, startup
from rftkit.inputs import InputError
from rftkit.trainer import colocate
from rftkit.overrides import load_yaml, resolve_config
from rftkit.trinity_config import validate

from conftest import REPO, trinity_config_stub


def test_one_gpu_is_planned_as_colocate_and_other_shapes_are_refused():
    plan = cluster.plan_cluster(1, 1, 1, None, configured=6)
    assert {key: plan[key] for key in ("node_num", "gpu_per_node", "engine_num", "mode", "trainer_gpus")} == \
        {"node_num": 1, "gpu_per_node": 1, "engine_num": 1, "mode": "colocate", "trainer_gpus": 1}
    assert cluster.plan_cluster(1, 1, 1, 1)["mode"] == "colocate"
    with pytest.raises(ValueError, match="one GPU holds one rollout engine"):
        cluster.plan_cluster(1, 1, 1, 2)
    with pytest.raises(ValueError, match="tensor_parallel_size 2"):
        cluster.plan_cluster(1, 1, 2, None)
    assert cluster.plan_cluster(2, 1, 1, None)["mode"] == "both"  # two one-GPU nodes: one each


def test_dry_run_on_one_gpu_validates_a_colocated_run(frozenlake_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the engine must go where the trainer goes
    code = frozenlake_main.main(["--dry-run", "--gpus", "1", "--attn", "sdpa", "--checkpoint-dir", str(tmp_path),
                                 "--data-dir", str(frozenlake_data),
                                 "--set", "explorer.rollout_model.gpu_memory_utilization=0.2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "(mode colocate)" in out
    assert "on the same GPU (colocate; engine memory 0.2)" in out
    assert "sync            memory" in out  # Trinity's choice: no NCCL between processes on one GPU

    from frozenlake.workflow import run_frozen_lake

    raw = load_yaml(REPO / "configs" / "frozenlake.yaml")
    config = cluster.with_plan(resolve_config(raw, {"checkpoint_root_dir": str(tmp_path)}),
                               cluster.plan_cluster(1, 1, 1, None))
    validated = validate(config, run_frozen_lake)
    rollout = validated.explorer.rollout_model
    assert validated.mode == "colocate" and validated.synchronizer.sync_method.value == "memory"
    assert rollout.gpu_memory_utilization == colocate.ENGINE_MEMORY_SHARE  # the config's 0.9 default, capped
    assert rollout.cuda_visible_devices == "3", "Trinity's validator must not put the engine back on GPU 0"
    assert "mode" not in yaml.safe_load((REPO / "configs" / "frozenlake.yaml").read_text())


ALLOCATE_ON_ONE_GPU = """
import asyncio, functools, os, sys, types
import ray
from ray.util.placement_group import placement_group
from rftkit.cluster import connect_ray

ray.init = functools.partial(ray.init, num_cpus=4, num_gpus=1)  # Ray counts GPUs: this CPU cluster has one
CONFIG_STUB
connect_ray(Config(), TIMELINE)
trainer = placement_group([{"CPU": 1, "GPU": 1}])  # what verl's trainer worker reserves
ray.get(trainer.ready())

class FixtureEngine:  # stands for vLLMRolloutModel: reports what Ray gave it
    def __init__(self, config):
        pass
    async def prepare(self):
        pass
    async def get_api_server_url(self):
        return None
    def gpu_ids(self):
        return ray.get_gpu_ids()

@ray.remote
class Explorer:  # stands for Trinity's Explorer actor, which creates the engines
    def create_engines(self):
        sys.modules["trinity.common.models.vllm_model"] = types.SimpleNamespace(vLLMRolloutModel=FixtureEngine)
        from trinity.common.config import ExplorerConfig, InferenceModelConfig
        from trinity.common.models.allocator import Allocator
        rollout = InferenceModelConfig(model_path="m", engine_num=1, gpu_per_engine=1, ray_namespace="colocate-test")
        models, _ = asyncio.run(Allocator(ExplorerConfig(rollout_model=rollout)).create_all_models())
        return ray.get(models[0].model.gpu_ids.remote())

try:
    print("engine GPUs:", ray.get(Explorer.remote().create_engines.remote(), timeout=TIMEOUT))
except ray.exceptions.GetTimeoutError:
    print("engine never started")
ray.shutdown()
"""


@pytest.mark.parametrize("mode,expected", [("colocate", "engine GPUs: []"), ("both", "engine never started")])
def test_the_colocated_engine_starts_beside_a_trainer_holding_the_only_gpu(mode, expected, tmp_path):
    """Without the hook, Trinity 0.6.0's allocator waits forever for a second GPU (Trinity issue #602)."""
    timeline = tmp_path / "startup.jsonl"
    code = ALLOCATE_ON_ONE_GPU.replace("CONFIG_STUB", trinity_config_stub("colocate-test", mode)) \
        .replace("TIMEOUT", "360" if mode == "colocate" else "10").replace("TIMELINE", repr(str(timeline)))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=480)
    assert result.returncode == 0, result.stderr[-3000:]
    assert expected in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    # the Explorer-like worker ran Trinity's own allocator, wrapped by the setup hook: it marked the phase
    phases = [entry["phase"] for entry in startup.read(timeline)]
    assert phases == (["rollout engines ready"] if mode == "colocate" else [])


@pytest.mark.parametrize("settings, line", [
    ([], "sync            memory, every 1 step(s), style explorer_driven\n"),
    (["synchronizer.sync_offset=1"], "explorer_driven, the explorer 1 step(s) ahead of the trainer (off-policy"),
    (["synchronizer.sync_style=fully_async", "buffer.explorer_input.eval_tasksets=[]"],
     "sync            memory, fully asynchronous: the explorer keeps up to 2 steps in flight"),
])
def test_the_dry_run_says_how_far_rollouts_may_run_ahead_of_the_weights(settings, line, frozenlake_data, tmp_path,
                                                                       capsys):
    flags = [flag for setting in settings for flag in ("--set", setting)]
    code = frozenlake_main.main(["--dry-run", "--gpus", "1", "--attn", "sdpa", "--checkpoint-dir", str(tmp_path),
                                 "--data-dir", str(frozenlake_data), *flags])
    assert code == 0
    assert line in capsys.readouterr().out


def test_fully_asynchronous_sync_with_an_evaluation_set_is_refused_naming_the_config(frozenlake_data, tmp_path):
    with pytest.raises(InputError, match="frozenlake.yaml: Eval tasksets are not supported in fully asynchronous"):
        frozenlake_main.main(["--dry-run", "--gpus", "1", "--attn", "sdpa", "--checkpoint-dir", str(tmp_path),
                              "--data-dir", str(frozenlake_data), "--set", "synchronizer.sync_style=fully_async"])
