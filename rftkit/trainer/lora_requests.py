"""A LoRA run's rollouts through the OpenAI API use the adapter being trained.

Trinity-RFT 0.6.0 serves an agentscope workflow through its engine's OpenAI-compatible server, and the
workflow's requests name the base model (Trinity's `model_path`). vLLM 0.23.0's server attaches an adapter
only to a request naming one the server registered (`OpenAIServing._maybe_get_adapters`), and Trinity
registers none there: at each sync it adds the new adapter to the engine (`add_lora`), not to the server. So
every rollout came from the base model while the trainer trained the adapter. Trinity's own generate and
chat calls pass the engine's current LoRARequest (`vLLMRolloutModel.get_lora_request`, which each sync
points at the new adapter); here the server gives the same to every request that names the base model.
"""

from __future__ import annotations

from types import ModuleType

from rftkit.patches.apply import replace

NAME = "lora.served_to_the_api"
SERVED = "LoRA adapter served to the OpenAI API's requests for the base model: "  # then its path, in the engine's log
_engine: list = []  # this process's rollout model serving an adapter (an engine actor is a process of its own)
_served: set[str] = set()  # the adapter paths already logged


def remember_the_engine(module: ModuleType) -> None:
    """A rollout model that serves an adapter is remembered when it is built."""
    def remembered(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if self.enable_lora:
                _engine[:] = [self]
        return __init__

    replace(NAME, module, "vLLMRolloutModel.__init__", remembered)


def adapter_for_the_base_model(module: ModuleType) -> None:
    """The server's requests that name the base model get the engine's current adapter."""
    def with_the_adapter(original):
        def _maybe_get_adapters(self, request, *args, **kwargs):
            found = original(self, request, *args, **kwargs)
            if found is not None or not _engine:
                return found
            adapter = _engine[0].get_lora_request()
            if adapter.lora_path not in _served:  # once per synced version, in the engine's own log
                _served.add(adapter.lora_path)
                _engine[0].logger.info(SERVED + adapter.lora_path)
            return adapter
        return _maybe_get_adapters

    replace(NAME, module, "OpenAIServing._maybe_get_adapters", with_the_adapter)
