"""The cluster a run gets: its shape from the GPUs found, and the Ray it runs on.

`plan_cluster` sizes a run (the config's rollout engines where they leave the trainer a GPU, else
engines on half the GPUs, the trainer on the rest; on one GPU both share it, Trinity's colocate
mode), `apply_plan` writes that into the YAML mapping and says what it had to change;
`detect_cluster`, `ensure_ray`, `connect_ray` and `ray_cli` find, start, join and stop Ray.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

from rftkit import patches, trinity_plugins, workers
from rftkit.inputs import InputError
from rftkit.trainer import colocate

# Rollout engines get this share of the GPUs; the trainer gets the rest.
EXPLORER_SHARE = 0.5
# What --dry-run plans for when this machine has no GPU and --gpus is not given: one 8-GPU node.
DRY_RUN_GPUS = 8


def plan_cluster(nodes: int, gpus_per_node: int, tensor_parallel: int, engines: int | None,
                 configured: int | None = None) -> dict:
    """Cluster shape, rollout engine count and Trinity mode for `nodes` x `gpus_per_node` GPUs.

    The engine count is `engines` (--engines) if given, else the config's own (`configured`) where
    those engines leave the trainer a GPU, else half the GPUs. `why` says why, when the count is
    not the config's; `trainer_gpus` is what the trainer is left with.
    """
    total = nodes * gpus_per_node
    if total == 1:  # the engine and the trainer share the one GPU
        if engines not in (None, 1):
            raise ValueError(f"--engines {engines}: one GPU holds one rollout engine beside the trainer; give "
                             f"--engines 1, or plan more GPUs (--gpus)")
        if tensor_parallel != 1:
            raise ValueError(f"explorer.rollout_model.tensor_parallel_size {tensor_parallel}: on one GPU the "
                             f"engine has that GPU alone; set it to 1, or plan more GPUs (--gpus)")
        return {"node_num": 1, "gpu_per_node": 1, "engine_num": 1, "mode": "colocate", "trainer_gpus": 1,
                "why": "one GPU: the engine and the trainer share it (colocate)"}
    if engines is not None:
        why = "--engines"
    elif configured is not None and configured * tensor_parallel < total:
        engines, why = configured, None
    else:
        engines = max(1, int(total * EXPLORER_SHARE) // tensor_parallel)
        why = (f"half of the {total} GPUs" if configured is None else
               f"the config's {configured} engine(s) x {tensor_parallel} GPU leave the trainer none of the "
               f"{total} GPUs: half of them")
    if engines < 1:
        raise ValueError(f"--engines must be at least 1, got {engines}")
    if engines * tensor_parallel >= total:
        raise ValueError(f"{engines} rollout engine(s) x {tensor_parallel} GPU(s) leave none of the {total} "
                         f"GPU(s) for the trainer; use --engines or more GPUs")
    return {"node_num": nodes, "gpu_per_node": gpus_per_node, "engine_num": engines, "mode": "both",
            "trainer_gpus": total - engines * tensor_parallel, "why": why}


def apply_plan(config: dict, plan: dict) -> list[str]:
    """Write `plan` (from plan_cluster) into the YAML mapping `config`: the cluster's shape, the engine
    count, on one GPU Trinity's colocate mode, and a sequence-parallel size the trainer's GPUs can hold.

    Returns one line per value changed from the config's, with the reason: what the machine forced.
    """
    changes = []

    def put(node: dict, key: str, value, dotted: str, why: str) -> None:
        if node.get(key) != value:
            if key in node:  # a value the config set: say what replaced it and why
                changes.append(f"{dotted}: {node[key]} -> {value} ({why})")
            node[key] = value

    found = f"{plan['node_num']} node(s) x {plan['gpu_per_node']} GPU(s) found or given"
    cluster_node = config.setdefault("cluster", {})
    put(cluster_node, "node_num", plan["node_num"], "cluster.node_num", found)
    put(cluster_node, "gpu_per_node", plan["gpu_per_node"], "cluster.gpu_per_node", found)
    rollout = config.setdefault("explorer", {}).setdefault("rollout_model", {})
    put(rollout, "engine_num", plan["engine_num"], "explorer.rollout_model.engine_num", plan["why"])
    if plan["mode"] == "colocate":
        config["mode"] = "colocate"
        # At or under Trinity's cap, so that its validator leaves the GPU choice below alone (above
        # the cap it also sets the engine's GPU to "0", the machine's first, whatever Ray was given).
        put(rollout, "gpu_memory_utilization", min(rollout.get("gpu_memory_utilization", 1.0),
                                                   colocate.ENGINE_MEMORY_SHARE),
            "explorer.rollout_model.gpu_memory_utilization", "the trainer has the rest of the one GPU")
        # The engine reserves no Ray GPU, so Ray does not choose its device: name the one we counted.
        rollout["cuda_visible_devices"] = first_device()
    trainer = config.setdefault("trainer", {})
    sequence_parallel = trainer.get("ulysses_sequence_parallel_size", 1)
    if plan["trainer_gpus"] % sequence_parallel:  # verl splits the trainer's GPUs into groups of this size
        put(trainer, "ulysses_sequence_parallel_size", 1, "trainer.ulysses_sequence_parallel_size",
            f"the trainer has {plan['trainer_gpus']} GPU(s); sequence-parallel groups of {sequence_parallel} "
            f"need a multiple of {sequence_parallel}")
    return changes


NVIDIA_DRIVER = "/proc/driver/nvidia/version"  # present wherever NVIDIA's kernel driver is loaded


def with_plan(config: dict, plan: dict) -> dict:
    """`config` with `plan` applied, for a caller that needs no account of the changes."""
    apply_plan(config, plan)
    return config


def local_gpus() -> int:
    """The CUDA GPUs this process can use. Without NVIDIA's driver there are none, and torch, seconds
    to import, is not asked: a dry run or a bad flag on a CPU machine does not wait for it."""
    if not os.path.exists(NVIDIA_DRIVER) and shutil.which("nvidia-smi") is None:
        return 0
    import torch

    return torch.cuda.device_count()


def first_device() -> str:
    """The GPU a one-GPU launch runs on: the first of CUDA_VISIBLE_DEVICES, else 0."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]


def local_gpu_memory_gib() -> float | None:
    """The memory of `first_device`, in GiB; None without a GPU, or where nvidia-smi does not say (the memory
    check is then skipped, not the launch). Read by nvidia-smi, since torch would open a CUDA context on it in
    the launcher, which lives as long as the run."""
    if local_gpus() == 0 or shutil.which("nvidia-smi") is None:
        return None
    try:
        found = subprocess.run(["nvidia-smi", "-i", first_device(), "--query-gpu=memory.total",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        return float(found.stdout.split()[0]) / 1024 if found.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):  # [N/A], [Insufficient Permissions]
        return None


RAY_ADDRESS_ENV = "RAY_ADDRESS"
PROBE_S = 3.0  # how long a cluster's GCS has to answer before it counts as gone


def cluster_to_join() -> str | None:
    """The Ray cluster a launch joins, if any: the one RAY_ADDRESS names, else the one `ray start` last recorded
    on this machine (Ray's address file: how docs/gpu.md starts several nodes), if it answers within PROBE_S.
    A cluster another process started with ray.init() (a test suite's) is not joined. An address in
    RAY_ADDRESS that does not answer is refused; one the address file kept after its cluster stopped, ignored."""
    from ray._private.utils import read_ray_address  # Ray 2.60's reader of the file `ray start` writes

    asked = os.environ.get(RAY_ADDRESS_ENV) or None
    address = asked if asked not in (None, "auto") else read_ray_address()
    if not address or address.startswith("ray://"):  # none; or Ray's client, which answers for itself
        return address or None
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=PROBE_S).close()
    except (OSError, ValueError):
        if asked not in (None, "auto"):
            raise InputError(f"{RAY_ADDRESS_ENV}={asked}: no Ray cluster answers there within {PROBE_S:.0f} s; "
                             f"start it, or unset {RAY_ADDRESS_ENV} to run on this machine's own Ray") from None
        return None
    return address


def detect_cluster() -> tuple[int, int]:
    """(nodes, GPUs per node) of the Ray cluster the launch will join (`cluster_to_join`), else of this machine."""
    address = cluster_to_join()
    if address is None:
        return 1, local_gpus()
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        gpu_nodes = [n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
    finally:
        ray.shutdown()
    return (len(gpu_nodes), int(min(gpu_nodes))) if gpu_nodes else (1, 0)


def ray_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", *args], check=True)


def fast_start_switches() -> dict[str, str]:
    """The start-up switches (rftkit.patches.FAST_START: the trainer's workers, the workflow runners and a lean
    rollout engine all start at once, docs/gpu.md) as the workers get them: on ("1") unless this process's
    environment sets one."""
    return {name: os.environ.get(name) or "1" for name in patches.FAST_START}


def check_switches() -> None:
    """Refuse a patch switch in the launch's environment that is neither 0 nor 1: the workers would read a word
    such as "false" as on for one switch and off for another."""
    for name in (*patches.FAST_START, patches.MICRO_BATCH_SHARE_ENV):
        value = os.environ.get(name)
        if value not in (None, "", "0", "1"):
            raise InputError(f"{name}={value} in the environment: expected 0 (off) or 1 (on)")


def connect_ray(trinity_config, timeline: os.PathLike | None = None) -> None:
    """Connect to Ray as Trinity's run_stage() would, with rftkit.workers' setup hook in every worker process
    (the colocated one on one GPU), the FAST_START switches on unless set to 0 and, with `timeline`,
    start-up marks (`rftkit.startup`). Trinity calls ray.init() with `ignore_reinit_error`, so this
    first connection is the one the run uses."""
    import ray

    hook = workers.setup_colocated if trinity_config.mode == "colocate" else workers.setup
    env_vars = trinity_config.get_envs()
    if timeline is not None:  # where the workers mark the start-up phases they end (rftkit.startup)
        env_vars[patches.TIMELINE_ENV] = str(timeline)
    env_vars.update(fast_start_switches())
    for name in (trinity_plugins.EXTRA_ENV, patches.MICRO_BATCH_SHARE_ENV):
        if os.environ.get(name):
            env_vars[name] = os.environ[name]
    if trinity_config.mode == "colocate":  # weights through the object store: in the engine's dtype, unless 0
        off = os.environ.get(patches.WEIGHT_SYNC_DTYPE_ENV) == "0"
        env_vars[patches.WEIGHT_SYNC_DTYPE_ENV] = "0" if off else trinity_config.explorer.rollout_model.dtype
    ray.init(address=trinity_config.cluster.ray_address, namespace=trinity_config.ray_namespace,
             runtime_env={"env_vars": env_vars,
                          "worker_process_setup_hook": f"{hook.__module__}.{hook.__name__}"})


def ensure_ray() -> bool:
    """Start a local Ray head unless there is a cluster to join (`cluster_to_join`); True if we started it."""
    if cluster_to_join() is not None:
        return False
    print("no Ray cluster to join: starting a local head (ray start --head)", flush=True)
    ray_cli("start", "--head", "--disable-usage-stats")
    return True
