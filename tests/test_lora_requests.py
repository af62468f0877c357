"""rftkit.trainer.lora_requests on fixture modules (named as such) that hold the lines of Trinity-RFT 0.6.0's
vLLMRolloutModel and vLLM 0.23.0's OpenAIServing the patch relies on (tests/test_patches.py finds those lines in
the installed packages; vLLM's server does not import on CPU)."""

import importlib.util
import logging

import pytest

from rftkit.trainer import lora_requests

ROLLOUT_MODEL = '''
class vLLMRolloutModel:
    def __init__(self, config):
        self.config = config
        self.enable_lora = config.enable_lora
        self.logger = config.logger

    def get_lora_request(self, lora_path=None):
        return LoRARequest(**self.config.lora_modules[0])

    async def sync_model_weights(self, model_version):
        await self.async_llm.add_lora(self.get_lora_request(self.default_lora_path))


class LoRARequest:
    def __init__(self, lora_name, lora_int_id, lora_path, base_model_name=None):
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path
'''
SERVING = '''
class OpenAIServing:
    def __init__(self, registered, base):
        self.models, self.base = registered, base

    def _maybe_get_adapters(self, request, supports_default_mm_loras=False):
        if request.model in self.models.lora_requests:
            return self.models.lora_requests[request.model]
        if self._is_model_supported(request.model):
            return None
        raise ValueError(f"The model `{request.model}` does not exist.")

    def _is_model_supported(self, name):
        return name == self.base
'''


def fixture_module(tmp_path, name, text):
    path = tmp_path / (name.rsplit(".", 1)[-1] + ".py")
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Named:
    def __init__(self, **values):
        self.__dict__.update(values)


@pytest.fixture
def patched(tmp_path, monkeypatch):
    monkeypatch.setattr(lora_requests, "_engine", [])
    monkeypatch.setattr(lora_requests, "_served", set())
    engine_module = fixture_module(tmp_path, "trinity.common.models.vllm_model", ROLLOUT_MODEL)
    serving_module = fixture_module(tmp_path, "vllm.entrypoints.openai.engine.serving", SERVING)
    lora_requests.remember_the_engine(engine_module)
    lora_requests.adapter_for_the_base_model(serving_module)
    return engine_module, serving_module


def engine(module, enable_lora, path):
    modules = [{"lora_name": "policy", "lora_int_id": 1, "lora_path": path}]
    return module.vLLMRolloutModel(Named(enable_lora=enable_lora, lora_modules=modules,
                                         logger=logging.getLogger("fixture-engine")))


def test_requests_for_the_base_model_get_the_engines_current_adapter(patched, caplog):
    engine_module, serving_module = patched
    served = engine(engine_module, True, "/run/global_step_1/actor/lora_adapter")
    server = serving_module.OpenAIServing(Named(lora_requests={"other": "the other adapter"}), base="/models/base")
    with caplog.at_level(logging.INFO, logger="fixture-engine"):
        first = server._maybe_get_adapters(Named(model="/models/base"))
        server._maybe_get_adapters(Named(model="/models/base"))
        served.config.lora_modules[0]["lora_path"] = "/run/global_step_2/actor/lora_adapter"  # what a sync does
        second = server._maybe_get_adapters(Named(model="/models/base"))
    assert (first.lora_name, first.lora_int_id) == ("policy", 1)
    assert first.lora_path == "/run/global_step_1/actor/lora_adapter"
    assert second.lora_path.endswith("global_step_2/actor/lora_adapter")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(lora_requests.SERVED)]
    assert lines == [lora_requests.SERVED + "/run/global_step_1/actor/lora_adapter",
                     lora_requests.SERVED + "/run/global_step_2/actor/lora_adapter"]  # once a version
    assert server._maybe_get_adapters(Named(model="other")) == "the other adapter"  # a named adapter stays its own
    with pytest.raises(ValueError, match="does not exist"):
        server._maybe_get_adapters(Named(model="unknown"))


def test_without_an_adapter_the_base_model_is_served_as_before(patched, caplog):
    engine_module, serving_module = patched
    engine(engine_module, False, "/unused")
    server = serving_module.OpenAIServing(Named(lora_requests={}), base="/models/base")
    assert server._maybe_get_adapters(Named(model="/models/base")) is None
