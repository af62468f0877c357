"""A one-GPU rollout engine gets vLLM's in-process executor, and its model is inspected without a subprocess."""

import importlib.util
import inspect
import os
import subprocess
import types

import pytest

from conftest import as_module, trinity_config_stub
from rftkit.patches import ASYNC_LLM, FAST_START, LEAN_ENGINE_ENV, REGISTRY, ROLLOUT_MODEL
from rftkit.patches.apply import PatchTargetMoved, applied, require
from rftkit.trainer import lean_engine


class AsyncLLMShape:
    """vLLM 0.23.0's AsyncLLM as the patch sees it: a classmethod that builds the engine's config from its arguments."""

    @classmethod
    def from_engine_args(cls, engine_args):
        engine_args.create_engine_config()
        return engine_args.distributed_executor_backend


def engine_args(backend="mp", **sizes):
    return types.SimpleNamespace(distributed_executor_backend=backend, create_engine_config=lambda: None,
                                 **{"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                                    "data_parallel_size": 1, "nnodes": 1, **sizes})


def patched_async_llm() -> type:
    copy = type("AsyncLLM", (AsyncLLMShape,), {"from_engine_args": AsyncLLMShape.__dict__["from_engine_args"]})
    lean_engine.patch_async_llm(as_module(ASYNC_LLM, AsyncLLM=copy))
    return copy


@pytest.mark.parametrize("backend,sizes,expected", [
    ("mp", {}, "uni"),
    ("mp", {"tensor_parallel_size": 2}, "mp"),
    ("mp", {"data_parallel_size": 2}, "mp"),
    ("mp", {"nnodes": 2}, "mp"),
    ("ray", {}, "ray"),
])
def test_only_a_one_gpu_mp_engine_is_moved_into_the_engine_core(backend, sizes, expected):
    assert patched_async_llm().from_engine_args(engine_args(backend, **sizes)) == expected


def test_patching_twice_wraps_once():
    cls = patched_async_llm()
    once = cls.__dict__["from_engine_args"].__func__
    lean_engine.patch_async_llm(as_module(ASYNC_LLM, AsyncLLM=cls))
    assert cls.__dict__["from_engine_args"].__func__ is once


def test_an_async_llm_that_moved_fails_naming_the_versions():
    class Moved:
        @classmethod
        def from_engine_args(cls, vllm_config):
            return vllm_config

    with pytest.raises(PatchTargetMoved, match="trinity-rft 0.6.0.*vllm 0.23.0.*set RFTKIT_LEAN_ENGINE=0"):
        lean_engine.patch_async_llm(as_module(ASYNC_LLM, AsyncLLM=Moved))


def test_the_real_trinity_engine_actor_still_asks_for_mp():
    from trinity.common.models import vllm_model

    require("lean_engine.uni_executor", vllm_model)
    moved = as_module(ROLLOUT_MODEL, vLLMRolloutModel=type("vLLMRolloutModel", (), {"prepare": lambda self: None}))
    with pytest.raises(PatchTargetMoved, match='prepare no longer has `distributed_executor_backend="mp"`'):
        require("lean_engine.uni_executor", moved)


def test_the_real_registry_inspects_qwen2_without_a_subprocess(tmp_path, monkeypatch):
    from vllm.model_executor.models import registry

    monkeypatch.setattr(registry, "_run_in_subprocess", registry._run_in_subprocess)  # restored afterwards
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))

    def no_subprocess(*args, **kwargs):
        raise AssertionError("the model was inspected in a subprocess")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    lean_engine.patch_registry(registry)
    info = registry._LazyRegisteredModel("vllm.model_executor.models.qwen2", "Qwen2ForCausalLM").inspect_model_cls()
    assert info.architecture == "Qwen2ForCausalLM" and info.is_text_generation_model
    assert (tmp_path / "modelinfos").is_dir(), "vLLM no longer caches what it inspected"


def test_a_registry_that_moved_fails_naming_the_versions():
    registered = type("_LazyRegisteredModel", (), {"inspect_model_cls": lambda self: None})
    moved = as_module(REGISTRY, _run_in_subprocess=lambda fn: fn(), _LazyRegisteredModel=registered)
    with pytest.raises(PatchTargetMoved, match="inspect_model_cls no longer has `_run_in_subprocess\\(`"):
        lean_engine.patch_registry(moved)


@pytest.mark.parametrize("asked,sent", [(None, "1"), ("", "1"), ("0", "0"), ("1", "1")])
def test_the_launcher_turns_the_fast_start_on_unless_told_0(asked, sent, monkeypatch):
    import ray

    from rftkit import cluster

    namespace = {}
    exec(trinity_config_stub("fast-start", "colocate"), namespace)
    runtime_envs = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: runtime_envs.append(kwargs["runtime_env"]))
    for name in FAST_START:
        if asked is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, asked)
    cluster.connect_ray(namespace["Config"]())
    assert set(FAST_START) == {"RFTKIT_CONCURRENT_START", "RFTKIT_EARLY_RUNNERS", "RFTKIT_LEAN_ENGINE"}
    sent_to_workers = {name: runtime_envs[0]["env_vars"][name] for name in FAST_START}
    assert sent_to_workers == dict.fromkeys(FAST_START, sent)


def test_the_dry_run_names_the_switches_and_how_the_engines_compile(monkeypatch):
    from rftkit.summary import start_up

    for name in ("RFTKIT_CONCURRENT_START", "RFTKIT_LEAN_ENGINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RFTKIT_EARLY_RUNNERS", "0")
    engine = types.SimpleNamespace(extra_engine_args={"compilation_config": {"mode": 0}})
    config = types.SimpleNamespace(explorer=types.SimpleNamespace(rollout_model=engine))
    assert start_up(config) == ("RFTKIT_CONCURRENT_START=1, RFTKIT_EARLY_RUNNERS=0, RFTKIT_LEAN_ENGINE=1; "
                                "engines: compilation {'mode': 0}")
    engine.extra_engine_args = {}
    assert start_up(config).endswith("engines: vLLM's default compilation")


@pytest.mark.parametrize("switch,method,lean", [(None, None, True), ("1", None, True), ("1", "spawn", True),
                                                ("0", None, False)])
def test_the_evaluation_server_starts_lean_unless_told_0(switch, method, lean, monkeypatch):
    import runpy

    from runkit import vllm_serve
    from vllm.model_executor.models import registry

    monkeypatch.setattr(registry, "_run_in_subprocess", registry._run_in_subprocess)  # restored afterwards
    for name, value in ((LEAN_ENGINE_ENV, switch), (vllm_serve.METHOD_ENV, method)):
        monkeypatch.setenv(name, "restored afterwards")
        monkeypatch.delenv(name)
        if value is not None:
            monkeypatch.setenv(name, value)
    served = []
    monkeypatch.setattr(runpy, "run_module", lambda name, **kwargs: served.append((name, kwargs)))
    vllm_serve.main()
    assert served == [("vllm.entrypoints.openai.api_server", {"run_name": "__main__", "alter_sys": True})]
    assert importlib.util.find_spec(vllm_serve.SERVER) is not None, "vLLM's server module moved"
    assert applied(registry._run_in_subprocess) == (["lean_engine.inspect_here"] if lean else [])
    # vLLM's command line would set spawn itself; a method the user names is kept
    assert os.environ.get(vllm_serve.METHOD_ENV) == (method or ("fork" if lean else None))


def test_vllms_server_still_asks_for_spawn_only_where_none_is_named():
    from vllm.entrypoints.serve.utils import api_utils

    source = inspect.getsource(api_utils.cli_env_setup)
    assert 'if "VLLM_WORKER_MULTIPROC_METHOD" not in os.environ' in source
    assert 'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"' in source
