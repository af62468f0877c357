import os
from pathlib import Path

import pytest

import launches
from rftkit.example import REPO  # noqa: F401 - the checkout's root, which the tests import from here

# Ray starts its worker processes at nice 15, where the other test process's work at nice 0 starves them and a Ray
# test's waits depend on how busy that process is. Every Ray cluster the tests start (here or in a subprocess, which
# inherits this) runs its workers at the tests' own priority.
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture(scope="session")
def frozenlake_data(tmp_path_factory):
    """A small dataset written by the real data code: 300 train and 100 test maps, sizes 2..6."""
    from frozenlake.data import write_dataset

    out = tmp_path_factory.mktemp("frozenlake")
    write_dataset(out, map_max_size=6, train_size=300, test_size=100, env_max_steps=8, seed=7, progress=False)
    return out


@pytest.fixture(scope="session")
def sample_work(tmp_path_factory):
    """A work folder holding every example's small data, made once by runkit.sample_data.make_data (the data the
    GPU smoke trains on)."""
    from runkit.sample_data import make_data

    work = tmp_path_factory.mktemp("sample")
    make_data(work)
    return work


@pytest.fixture(scope="session")
def smollm2_tokenizer(tmp_path_factory):
    """SmolLM2's tokenizer as runkit.tiny_model prepares it, exported once per test process as HF files: loading
    it from its GGUF takes seconds, from this folder a fraction of one (tests/test_tiny_model.py checks that both
    give the same tokenizer)."""
    from runkit.tiny_model import export_tokenizer

    return export_tokenizer(tmp_path_factory.mktemp("smollm2-tokenizer"))


def copy_sample_data(sample_work: Path, work: Path, only: str | None = None) -> Path:
    """The sample data (or its `only` subfolder, e.g. "frozenlake") copied into `work`: where a test's launch
    command looks for it, since every launch refuses missing data, dry runs too."""
    import shutil

    source = sample_work / "data" / (only or "")
    shutil.copytree(source, work if only else work / "data", dirs_exist_ok=True)
    return work


def config_only_model(folder: Path) -> Path:
    """A model folder as the launcher's checks see one (a config.json), for a test whose model is never loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return folder


def dry_run(command: list[str], gpus: int = 2, env: dict | None = None) -> str:
    """A launch command, as the GPU scripts build it, run with --dry-run (in a child of the fork server,
    tests/launches.py): its stdout, after exit 0."""
    result = launches.run([*command, "--dry-run", "--gpus", str(gpus)], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def hold_script_calls(script: str, args: list[str], tmp_path: Path, env: dict | None = None,
                      seen: tuple[str, ...] = ()) -> tuple[str, list]:
    """A GPU hold's script (experiments/holds/) run with a `python3` on PATH that records each call's arguments
    instead of running it: (its stdout, each call's argument list in the order it was made), each list led by
    NAME=VALUE for the environment variables `seen` names, as the call found them."""
    import subprocess

    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(), calls.mkdir()
    shown = "".join(f' "{name}=${name}"' for name in seen)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nprintf "%s\\0"{shown} "$@" > "{calls}/$(ls {calls} | wc -l)"\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    stdout = subprocess.run(["bash", script, *args], cwd=REPO, env=env, capture_output=True, text=True,
                            check=True).stdout
    return stdout, [call.read_text().split("\0")[:-1] for call in sorted(calls.iterdir(), key=lambda p: int(p.name))]


def trinity_config_stub(namespace: str, mode: str) -> str:
    """Source of a class with the fields of Trinity's config that rftkit.cluster.connect_ray reads, for the
    scripts the Ray tests run in a process of their own."""
    return f"""
class Config:
    class cluster:
        ray_address = "local"
    class explorer:
        class rollout_model:
            dtype = "bfloat16"
    ray_namespace = {namespace!r}
    mode = {mode!r}
    def get_envs(self):
        return {{}}
"""


def write_scalars(run: Path, side: str, series: dict[str, list[tuple]]) -> None:
    """Tensorboard files as Trinity's monitor writes them, in <run>/monitor/tensorboard/<side> (explorer, trainer):
    each tag's (step, value) or (step, value, wall time) points."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run / "monitor" / "tensorboard" / side))
    for tag, points in series.items():
        for step, value, *wall_time in points:
            writer.add_scalar(tag, value, step, walltime=wall_time[0] if wall_time else None)
    writer.close()


def write_checkpoint(folder: Path, world_size: int = 1, hf_weights: bool = False) -> Path:
    """A checkpoint folder laid out as verl 0.8 saves one (tiny tensors): each rank's model, optimizer and
    extra-state archives in actor/, the HF config folder, and with `hf_weights` its safetensors. Returns actor/."""
    import torch
    from safetensors.torch import save_file

    actor = folder / "actor"
    (actor / "huggingface").mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        for kind in ("model", "optim", "extra_state"):
            shard = actor / f"{kind}_world_size_{world_size}_rank_{rank}.pt"
            torch.save({"rank": rank, "w": torch.arange(64.0)}, shard)
    (actor / "huggingface" / "config.json").write_text("{}")
    if hf_weights:
        save_file({"w": torch.arange(64.0)}, str(actor / "huggingface" / "model.safetensors"))
    return actor


def write_model(folder, seed, init_range=0.02, nudge_from=None):
    """A small random Llama (vocabulary above every probe token id); or, with nudge_from, that
    model's weights plus noise of std `init_range`: an update of that size."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.gpu import engine_check

    torch.manual_seed(seed)
    if nudge_from is not None:
        model = LlamaForCausalLM.from_pretrained(nudge_from)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * init_range)
    else:
        config = LlamaConfig(vocab_size=max(engine_check.PROBE_TOKENS) + 64, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             initializer_range=init_range)
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def versions(tmp_path_factory):
    """The trainer's weights at versions 0 and 1 (an update that moved them), and a version 1 barely moved."""
    root = tmp_path_factory.mktemp("versions")
    v0 = write_model(root / "v0", seed=0, init_range=0.2)
    return {0: v0, 1: write_model(root / "v1", seed=1, init_range=0.05, nudge_from=v0),
            "barely": write_model(root / "barely", seed=2, init_range=1e-5, nudge_from=v0)}


# pytest-xdist runs the suite in two processes (pyproject.toml). Tests that start or join a Ray cluster share
# one: Ray's head takes a fixed port, and address="auto" joins whichever cluster on the machine started last.
# Those that need the GPU share another, and the GSM-Symbolic generator's the Python 3.12 venv they build. Each
# group runs in one process. A costly fixture shared by a module's tests is session-scoped: xdist interleaves modules
# in a process, and a module-scoped fixture would be built again each time its module came back.
SERIAL_GROUPS = {
    "ray": {"test_attention.py", "test_colocate.py", "test_engine_check.py", "test_frozenlake_training_path.py",
            "test_run_supervision.py", "test_steps.py", "test_weight_sync.py", "test_resumable_selector.py",
            "test_trainer_speed.py"},
    "gpu": {"test_gpu_trainer_path.py", "test_resume_smoke.py", "test_gpu_smoke.py"},
    "gsm": {"test_gsm_symbolic.py"},
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups from these markers
def pytest_collection_modifyitems(items):
    for item in items:
        for group, files in SERIAL_GROUPS.items():
            if item.path.name in files:
                item.add_marker(pytest.mark.xdist_group(group))


def as_module(name: str, **attributes):
    """A stand-in for module `name` holding `attributes`: what a patch is installed on, under the name that
    rftkit.patches declares for it."""
    import types

    module = types.ModuleType(name)
    vars(module).update(attributes)
    return module
