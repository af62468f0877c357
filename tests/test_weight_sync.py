"""rftkit.trainer.weight_sync: the colocated weight hand-over in the engine's dtype, on FSDP2 and FSDP1 models (CPU)."""

import os
import subprocess
import sys
import types

import pytest

from conftest import REPO, trinity_config_stub
from rftkit import patches
from rftkit.patches import SYNCHRONIZER, TRINITY_FSDP
from rftkit.patches.apply import PatchTargetMoved
from rftkit.trainer import weight_sync

GATHER = """
import os, sys, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from runkit.serving import free_port
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
model.register_buffer("steps", torch.tensor([7]))
if sys.argv[1] == "fsdp2":
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
else:  # verl's FSDP1: flat weights, on one rank unsharded
    model = FullyShardedDataParallel(model, device_id=torch.device("cpu"), device_mesh=mesh)
import trinity.trainer.verl.fsdp_engine as fsdp_engine
original = fsdp_engine.get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
from rftkit.trainer.weight_sync import use_engine_dtype
use_engine_dtype(fsdp_engine)
cast = fsdp_engine.get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
assert list(cast) == list(original), (list(cast), list(original))
for name, tensor in original.items():
    want = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
    assert cast[name].dtype == want.dtype and cast[name].device.type == "cpu" and torch.equal(cast[name], want), name
print("same names, bf16 values, integer buffer kept")
dist.destroy_process_group()
"""


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_the_gather_hands_over_bf16_values_under_the_same_names(strategy):
    env = {**os.environ, patches.WEIGHT_SYNC_DTYPE_ENV: "bfloat16"}
    result = subprocess.run([sys.executable, "-c", GATHER, strategy], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "same names, bf16 values, integer buffer kept" in result.stdout


def fake_fsdp_engine(gather_call: str) -> types.ModuleType:
    module = types.ModuleType(TRINITY_FSDP)
    exec(f"def fsdp_upload_state_dict(engine, synchronizer, global_step, logger):\n"
         f"    state_dict = {gather_call}\n", module.__dict__)
    module.get_fsdp_full_state_dict = lambda model, offload_to_cpu=True, rank0_only=True: {}
    return module


@pytest.mark.parametrize("value", [None, "float32", "auto", "0"])
def test_nothing_changes_unless_the_engine_runs_in_16_bits(value, monkeypatch):
    monkeypatch.delenv(patches.WEIGHT_SYNC_DTYPE_ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(patches.WEIGHT_SYNC_DTYPE_ENV, value)
    module = fake_fsdp_engine("get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)")
    before = module.get_fsdp_full_state_dict
    weight_sync.use_engine_dtype(module)
    assert module.get_fsdp_full_state_dict is before


def test_a_trinity_that_gathers_differently_stops_the_worker(monkeypatch):
    monkeypatch.setenv(patches.WEIGHT_SYNC_DTYPE_ENV, "bfloat16")
    with pytest.raises(PatchTargetMoved, match="'weight_sync.engine_dtype'.*set RFTKIT_WEIGHT_SYNC_DTYPE=0"):
        weight_sync.use_engine_dtype(fake_fsdp_engine("gather_somehow_else(model)"))


def test_a_colocated_launch_gives_every_worker_the_engine_dtype():
    """connect_ray puts the engine's dtype in the job's environment; verl's workers, started by Trinity's
    Trainer with environment variables of their own, must still see it."""
    code = """
import os, ray
from rftkit.cluster import connect_ray

@ray.remote
class Worker:
    def dtype(self):
        return os.environ.get("RFTKIT_WEIGHT_SYNC_DTYPE"), os.environ.get("RANK")

@ray.remote
class Trainer:
    def run(self):
        return ray.get(Worker.options(runtime_env={"env_vars": {"RANK": "0"}}).remote().dtype.remote())

CONFIG_STUB
connect_ray(Config())
print("worker sees:", ray.get(Trainer.remote().run.remote()))
ray.shutdown()
""".replace("CONFIG_STUB", trinity_config_stub("weight-sync-test", "colocate"))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "worker sees: ('bfloat16', '0')" in result.stdout


@pytest.mark.parametrize("asked,sent", [(None, "bfloat16"), ("0", "0"), ("float16", "bfloat16")])
def test_the_launch_sends_the_engine_dtype_unless_told_0(asked, sent, monkeypatch):
    import ray

    from rftkit import cluster

    namespace = {}
    exec(trinity_config_stub("dtype", "colocate"), namespace)
    runtime_envs = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: runtime_envs.append(kwargs["runtime_env"]))
    monkeypatch.setenv(patches.WEIGHT_SYNC_DTYPE_ENV, "restored afterwards")
    monkeypatch.delenv(patches.WEIGHT_SYNC_DTYPE_ENV)
    if asked is not None:
        monkeypatch.setenv(patches.WEIGHT_SYNC_DTYPE_ENV, asked)
    cluster.connect_ray(namespace["Config"]())
    assert runtime_envs[0]["env_vars"][patches.WEIGHT_SYNC_DTYPE_ENV] == sent


@pytest.mark.parametrize("make", [
    lambda torch: torch.randn(3, 5).to(torch.bfloat16),
    lambda torch: torch.randn(4, 6)[:, ::2],  # not contiguous
    lambda torch: torch.tensor(7),  # no dimensions
    lambda torch: torch.arange(10, dtype=torch.int64).reshape(2, 5),
])
def test_a_tensor_survives_its_byte_view(make):
    import torch

    tensor = make(torch)
    back = weight_sync.tensor_from_view(weight_sync.tensor_as_view(tensor))
    assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor)


VIEWS_IN_A_COLOCATED_RUN = """
import ray, torch
from rftkit import workers
from rftkit.patches.apply import applied
from rftkit.trainer import weight_sync
workers.setup_colocated()  # what Ray's hook runs in every worker of a colocated run
import trinity.manager.synchronizer as synchronizer
import trinity.trainer.verl.fsdp_engine as fsdp_engine
print("upload sends views:", applied(fsdp_engine.fsdp_upload_state_dict) == ["weight_sync.upload_as_views"])
print("gather patched:", applied(fsdp_engine.get_fsdp_full_state_dict) == ["weight_sync.engine_dtype"])
print("synchronizer sends views:", all(applied(getattr(synchronizer.Synchronizer, name))
                                       == ["weight_sync.synchronizer_views"]
                                       for name in ("get_model_state_dict_iterator", "get_model_state_dict")))

ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
def mapped_twice(ref):  # the same memory on both gets: a view of the object store, not a copy
    first, second = ray.get(ref), ray.get(ref)  # both held: a freed copy's memory could come back
    return first.data_ptr() == second.data_ptr()
weights = torch.randn(1000, 100).to(torch.bfloat16)
with weight_sync.tensors_as_views():
    inside = ray.put(weights)
after = ray.put(weights)
print("inside the block:", mapped_twice(inside), torch.equal(ray.get(inside), weights))
print("after it:", mapped_twice(after), torch.equal(ray.get(after), weights))
ray.shutdown()
"""


def test_a_colocated_run_sends_the_weights_and_only_them_as_views():
    env = {**os.environ, patches.WEIGHT_SYNC_DTYPE_ENV: "bfloat16"}
    result = subprocess.run([sys.executable, "-c", VIEWS_IN_A_COLOCATED_RUN], cwd=REPO, capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for line in ("upload sends views: True", "gather patched: True", "synchronizer sends views: True",
                 "inside the block: True True", "after it: False True"):
        assert line in result.stdout, result.stdout + result.stderr[-2000:]


def test_a_trinity_that_sends_differently_stops_the_worker():
    with pytest.raises(PatchTargetMoved, match="fsdp_upload_state_dict no longer has `synchronizer.set_model"):
        weight_sync.send_uploads_as_views(fake_fsdp_engine("get_fsdp_full_state_dict(model)"))
    synchronizer = types.ModuleType(SYNCHRONIZER)
    synchronizer.Synchronizer = type("Synchronizer", (), {"get_model_state_dict": lambda self: None})
    with pytest.raises(PatchTargetMoved, match="Synchronizer.get_model_state_dict_iterator is missing"):
        weight_sync.synchronizer_sends_views(synchronizer)
