"""Every runtime change this project makes to another package, declared: what it replaces, why, the versions
it was written for, what it relies on there, its switch and the processes that get it.

`rftkit.patches.apply` installs from this table and refuses to replace anything a patch does not
declare; `python -m rftkit.patches` prints the table as `docs/patches.md` (a test keeps the page in step),
for whoever upgrades Trinity-RFT, verl or vLLM. Data only: importing it loads none of those packages.

A key is "module:path", the module as imported and the path of the object in it ("Class.method"; ""
for the module's own source). `replaces` gives, for each attribute replaced, texts its source must still
hold; `requires` the same for what the patch relies on without replacing it. Every patch has at least one
such guard.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

TRINITY = {"trinity-rft": "0.6.0"}
VERL = {"verl": "0.8.0"}

# The switches, each read here and set by the launcher (rftkit.cluster) in its workers' environment.
CONCURRENT_START_ENV = "RFTKIT_CONCURRENT_START"
EARLY_RUNNERS_ENV = "RFTKIT_EARLY_RUNNERS"
LEAN_ENGINE_ENV = "RFTKIT_LEAN_ENGINE"
FAST_START = (CONCURRENT_START_ENV, EARLY_RUNNERS_ENV, LEAN_ENGINE_ENV)  # "1" unless the launch's environment says 0
WEIGHT_SYNC_DTYPE_ENV = "RFTKIT_WEIGHT_SYNC_DTYPE"  # the engine's dtype, or 0
MICRO_BATCH_SHARE_ENV = "RFTKIT_MICRO_BATCH_SHARE"  # on unless 0
TIMELINE_ENV = "RFTKIT_STARTUP_TIMELINE"  # the launch's timeline file
COMPILE_LAYERS_ENV, CHECKPOINT_EVERY_ENV = "RFTKIT_COMPILE_LAYERS", "RFTKIT_CHECKPOINT_EVERY"  # benchmark levers


@dataclass(frozen=True)
class Switch:
    on: Callable[[], bool]
    off: str  # how a user runs without the patch, as the end of a sentence


ALWAYS = Switch(lambda: True, "install the versions it was written for (requirements/lock-gpu.txt): it has no switch")


def env_is_1(name: str) -> Switch:
    return Switch(lambda: os.environ.get(name) == "1", f"set {name}=0 in the launch's environment")


def unless_0(name: str) -> Switch:
    return Switch(lambda: os.environ.get(name) != "0", f"set {name}=0 in the launch's environment")


def _no_flash_attn() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is None


NO_FLASH_ATTN = Switch(_no_flash_attn, "install flash-attn, or train with --attn sdpa (padded, slower)")


def _levers_asked() -> bool:
    return os.environ.get(COMPILE_LAYERS_ENV, "") not in ("", "0") or os.environ.get(CHECKPOINT_EVERY_ENV, "1") != "1"


@dataclass(frozen=True)
class Patch:
    name: str
    why: str
    written_for: dict[str, str]  # package -> version the patched code was read in
    install: dict[str, str]  # module -> "rftkit.module:function" called with it once it is imported
    replaces: dict[str, tuple[str, ...]]
    processes: tuple[str, ...]  # "worker" (every Ray worker of a run), "colocated" (of a one-GPU run), "launcher",
    # "vllm server" (runkit.vllm_serve), "gguf conversion" (runkit.serving, for the conversion only), "trainer
    # benchmark" (experiments.trainer_speed's trainer process)
    switch: Switch = ALWAYS
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)
    retired_by: str = ""  # the upstream change that would make it unneeded


def _table(*patches: Patch) -> dict[str, Patch]:
    return {patch.name: patch for patch in patches}


FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"
TRINITY_VERL_TRAINER = "trinity.trainer.verl.trainer"
ALLOCATOR = "trinity.common.models.allocator"
TRINITY_FSDP = "trinity.trainer.verl.fsdp_engine"
SYNCHRONIZER = "trinity.manager.synchronizer"
ROLLOUT_MODEL = "trinity.common.models.vllm_model"
ASYNC_LLM = "vllm.v1.engine.async_llm"
OPENAI_SERVING = "vllm.entrypoints.openai.engine.serving"
REGISTRY = "vllm.model_executor.models.registry"
TRINITY_WORKERS = "trinity.trainer.verl.workers"
TRINITY_LOSSES = "trinity.trainer.verl.losses"
CHECKPOINT_MANAGER = "verl.utils.checkpoint.fsdp_checkpoint_manager"
# (module, class, method, phase): the method's return is the phase's end, in the order a launch reaches them
STARTUP_PHASES = (
    ("trinity.trainer.trainer", "Trainer", "prepare", "trainer ready (FSDP workers, model loaded)"),
    (ALLOCATOR, "Allocator", "create_all_models", "rollout engines ready"),
    ("trinity.explorer.rollout_coordinator", "RolloutCoordinator", "_init_experience_pipeline",
     "experience pipeline ready"),
    ("trinity.explorer.scheduler", "Scheduler", "start", "workflow runners ready"),
    ("trinity.explorer.explorer", "Explorer", "prepare", "explorer ready"),
    ("trinity.explorer.explorer", "Explorer", "sync_weight", "first weights sent to the engine"),
    ("trinity.explorer.explorer", "Explorer", "_finish_explore_step", "first explore step"),
    ("trinity.trainer.trainer", "Trainer", "train_step", "first train step"),
)

PATCHES = _table(
    Patch("plugins.after_trinitys",
          "every worker imports the project's Trinity plugins by name right after Trinity loads its own",
          TRINITY, {"trinity.utils.plugin_loader": "rftkit.trinity_plugins:after_trinity_loads_plugins"},
          {"trinity.utils.plugin_loader:load_plugins": ("load_plugin_from_dirs(plugin_dirs)",)},
          ("worker",)),
    Patch("attention.out_of_checkpoints",
          "a checkpoint's config.json names no attention that only this project's trainer can load",
          VERL, {"verl.workers.config.model": "rftkit.trainer.packed_attention:keep_out_of_checkpoints"},
          {"verl.workers.config.model:HFModelConfig.__post_init__": ("update_model_config(self.hf_config",)},
          ("worker",)),
    Patch("attention.torch_padding", "verl's padding helpers without flash-attn: its own pure-torch ones",
          VERL, {"verl.utils.attention_utils": "rftkit.trainer.attention:use_torch_padding"},
          {"verl.utils.attention_utils:_get_attention_functions": ("from flash_attn.bert_padding import",)},
          ("worker",), NO_FLASH_ATTN),
    Patch("logprobs.in_blocks", "verl's log-probs without flash-attn: in blocks, not a Python loop over tokens",
          VERL, {"verl.utils.torch_functional": "rftkit.trainer.logprobs:use_in_verl"},
          {"verl.utils.torch_functional:logprobs_from_logits_v2": ()}, ("worker",), NO_FLASH_ATTN,
          requires={"verl.utils.torch_functional:logprobs_from_logits": ("logprobs_from_logits_v2(logits, labels)",)}),
    Patch("loss.micro_batch_share", "each micro-batch's loss counts by its share of the mini-batch, as in verl's own "
          "losses (Trinity's returns each micro-batch's mean, so the gradient grew with their number)",
          {**TRINITY, **VERL}, {TRINITY_LOSSES: "rftkit.trainer.loss_scale:weigh_micro_batches",
                                 FSDP_ENGINE: "rftkit.patches:nothing_to_install"},
          {f"{TRINITY_LOSSES}:TrinityPolicyLoss.__call__":
           ("policy_loss = pg_loss", "loss_agg_mode=self.loss_agg_mode", "return policy_loss, metrics")},
          ("worker",), unless_0(MICRO_BATCH_SHARE_ENV),
          requires={f"{FSDP_ENGINE}:FSDPEngine.forward_backward_batch":
                    ("batch_num_tokens=batch_num_tokens.item()", "dp_size=self.get_data_parallel_size()",
                     "loss.backward()")}),
    Patch("ref_model.on_gpu", "the reference model's weights stay on the GPU unless the config offloads them",
          VERL, {FSDP_ENGINE: "rftkit.trainer.ref_model:keep_on_gpu"},
          {f"{FSDP_ENGINE}:FSDPEngine._build_fsdp_module":
           ("if self.engine_config.offload_policy or self.engine_config.forward_only:",)}, ("worker",)),
    Patch("layer_levers", "the trainer's decoder layers compiled, or checkpointed every N-th only (benchmark levers)",
          VERL, {FSDP_ENGINE: "experiments.trainer_speed.layer_levers:from_environment"},
          {f"{FSDP_ENGINE}:FSDPEngine._build_fsdp_module": ()}, ("trainer benchmark",),
          Switch(_levers_asked, f"unset {COMPILE_LAYERS_ENV} and {CHECKPOINT_EVERY_ENV}"),
          requires={f"{FSDP_ENGINE}:FSDPEngine._build_model_optimizer":
                    ("module = self._build_module()", "module = self._build_fsdp_module(module)")}),
    Patch("concurrent_start", "the trainer's FSDP workers are built while the rollout engine starts",
          TRINITY, {TRINITY_VERL_TRAINER: "rftkit.trainer.concurrent_start:defer_worker_init"},
          {f"{TRINITY_VERL_TRAINER}:VERLTrainer._init_workers": (),
           f"{TRINITY_VERL_TRAINER}:VERLTrainer.prepare": ("async def prepare",)},
          ("worker",), env_is_1(CONCURRENT_START_ENV),
          requires={f"{TRINITY_VERL_TRAINER}:VERLTrainer.__init__": ("self._init_workers()",)}),
    Patch("early_runners", "the workflow runners start while the rollout engines start",
          TRINITY, {"trinity.explorer.explorer": "rftkit.trainer.early_runners:patch_explorer",
                    "trinity.explorer.rollout_coordinator": "rftkit.trainer.early_runners:patch_coordinator",
                    ALLOCATOR: "rftkit.trainer.early_runners:patch_allocator",
                    "trinity.explorer.workflow_runner": "rftkit.trainer.early_runners:patch_runner"},
          {"trinity.explorer.explorer:Explorer.prepare":
           ("create_all_models()", "RolloutCoordinator.get_actor(self.config)",
            "await self.rollout_coordinator.prepare.remote()"),
           "trinity.explorer.explorer:RolloutCoordinator.get_actor": (),
           "trinity.explorer.rollout_coordinator:RolloutCoordinator.prepare": ("async def prepare", "if self.running:"),
           f"{ALLOCATOR}:Allocator.get_model": ("ray.get_actor(actor_name, namespace=config.ray_namespace)",),
           "trinity.explorer.workflow_runner:WorkflowRunner.prepare":
           ("async def prepare", "self.model_wrapper.prepare()")},
          ("worker",), env_is_1(EARLY_RUNNERS_ENV)),
    Patch("lean_engine.uni_executor", "a one-GPU rollout engine runs its worker inside vLLM's engine core process",
          {**TRINITY, "vllm": "0.23.0"}, {ROLLOUT_MODEL: "rftkit.patches:nothing_to_install",
                                          ASYNC_LLM: "rftkit.trainer.lean_engine:patch_async_llm"},
          {f"{ASYNC_LLM}:AsyncLLM.from_engine_args": ("engine_args.create_engine_config(",)},
          ("worker",), env_is_1(LEAN_ENGINE_ENV),
          requires={f"{ROLLOUT_MODEL}:vLLMRolloutModel.prepare":
                    ('distributed_executor_backend="mp"', "vllm.AsyncLLMEngine.from_engine_args(engine_args)")}),
    Patch("lean_engine.inspect_here", "vLLM's model registry inspects a model class in this process, not a new one",
          {"vllm": "0.23.0"}, {REGISTRY: "rftkit.trainer.lean_engine:patch_registry"},
          {f"{REGISTRY}:_run_in_subprocess": ()}, ("worker", "vllm server"), env_is_1(LEAN_ENGINE_ENV),
          requires={f"{REGISTRY}:_LazyRegisteredModel.inspect_model_cls": ("_run_in_subprocess(",)}),
    Patch("lora.adapter_syncs", "a LoRA run's sync writes the adapter alone, whole (Trinity's writer gives an "
          "empty adapter with PEFT 0.21)",
          TRINITY, {TRINITY_WORKERS: "rftkit.trainer.lora_saves:adapter_only"},
          {f"{TRINITY_WORKERS}:TrinityActorRolloutRefWorker.save_state_dict":
           ("per_tensor_param, _ = self.actor.engine.get_per_tensor_param()",),
           f"{TRINITY_WORKERS}:TrinityActorRolloutRefWorker._save_lora":
           ('lora_save_path = os.path.join(local_path, "lora_adapter")',)}, ("worker",)),
    Patch("lora.served_to_the_api", "a LoRA run's rollouts through the OpenAI API get the adapter being trained, "
          "not the base model",
          {**TRINITY, "vllm": "0.23.0"}, {ROLLOUT_MODEL: "rftkit.trainer.lora_requests:remember_the_engine",
                                          OPENAI_SERVING: "rftkit.trainer.lora_requests:adapter_for_the_base_model"},
          {f"{ROLLOUT_MODEL}:vLLMRolloutModel.__init__": ("self.enable_lora = config.enable_lora",),
           f"{OPENAI_SERVING}:OpenAIServing._maybe_get_adapters":
           ("if request.model in self.models.lora_requests:", "if self._is_model_supported(request.model):")},
          ("worker",),
          requires={f"{ROLLOUT_MODEL}:vLLMRolloutModel.get_lora_request":
                    ("LoRARequest(**self.config.lora_modules[0])",),
                    f"{ROLLOUT_MODEL}:vLLMRolloutModel.sync_model_weights":
                    ("await self.async_llm.add_lora(self.get_lora_request(self.default_lora_path))",)}),
    Patch("lora.small_checkpoints", "a PEFT model's checkpoint holds its adapter, not the frozen base model",
          VERL, {CHECKPOINT_MANAGER: "rftkit.trainer.lora_saves:small_checkpoints"},
          {f"{CHECKPOINT_MANAGER}:FSDPCheckpointManager.save_checkpoint":
           ("model_state_dict = self.model.state_dict()",),
           f"{CHECKPOINT_MANAGER}:FSDPCheckpointManager.load_checkpoint":
           ("self.model.load_state_dict(model_state_dict)",)}, ("worker",)),
    Patch("run_state.whole_files", "Trinity's state files are written whole, and the explorer's kept per step, so "
          "that a killed run resumes", TRINITY, {"trinity.manager.state_manager": "rftkit.run_state:safe_state_files"},
          {"trinity.manager.state_manager:StateManager.save_explorer": ('open(self.explorer_state_path, "w"',),
           "trinity.manager.state_manager:StateManager.save_trainer": ('open(self.trainer_state_path, "w"',)},
          ("worker",)),
    Patch("checkpoints.kill_safe", "the checkpoint tracker is written whole, a complete step is not saved twice, "
          "and the checkpoint a relaunch loads is never removed",
          TRINITY, {TRINITY_VERL_TRAINER: "rftkit.checkpoints:safe_checkpoints"},
          {f"{TRINITY_VERL_TRAINER}:open": (),
           f"{TRINITY_VERL_TRAINER}:VERLTrainer.save_checkpoint": ('f"global_step_{self.global_steps}"',),
           f"{TRINITY_VERL_TRAINER}:VERLTrainer._retain_checkpoints": ("self._saved_checkpoint_paths",)},
          ("worker",),
          requires={f"{TRINITY_VERL_TRAINER}:CheckpointMonitor.update_latest_checkpoint_step":
                    ('open(self.local_latest_checkpointed_iteration, "w")',),
                    f"{TRINITY_VERL_TRAINER}:CheckpointMonitor.update_latest_state_dict_step":
                    ('open(self.local_latest_state_dict_iteration, "w")',)}),
    Patch("startup.timeline", "each start-up phase's end is marked in the launch's timeline",
          TRINITY, {module: "rftkit.startup:marks_ends" for module, *_ in STARTUP_PHASES},
          {f"{module}:{cls}.{method}": (f"async def {method}",) for module, cls, method, _ in STARTUP_PHASES},
          ("worker",), Switch(lambda: bool(os.environ.get(TIMELINE_ENV)),
                              f"unset {TIMELINE_ENV} (the launcher sets it)")),
    Patch("colocate.engine_without_gpu", "on one GPU the engine reserves no Ray GPU beside the trainer's, or the "
          "run waits forever", TRINITY, {ALLOCATOR: "rftkit.trainer.colocate:engines_reserve_no_gpu"},
          {f"{ALLOCATOR}:Allocator.allocate_bundles": ('bundles.append({"GPU": float(gpus_per_bundle), "CPU": 1})',),
           f"{ALLOCATOR}:ray": ()}, ("colocated",),
          requires={f"{ALLOCATOR}:get_model_wrapper": ("ray.remote(actor_cls)", "num_gpus=")},
          retired_by="Trinity-RFT issue #602 (fixed after 0.6.0)"),
    Patch("weight_sync.engine_dtype", "a colocated sync gathers the weights in the engine's dtype on the GPU",
          TRINITY, {TRINITY_FSDP: "rftkit.trainer.weight_sync:use_engine_dtype"},
          {f"{TRINITY_FSDP}:get_fsdp_full_state_dict": ()}, ("colocated",),
          Switch(lambda: os.environ.get(WEIGHT_SYNC_DTYPE_ENV, "0") != "0",
                 f"set {WEIGHT_SYNC_DTYPE_ENV}=0 in the launch's environment"),
          requires={f"{TRINITY_FSDP}:fsdp_upload_state_dict":
                    ("get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)",)}),
    Patch("weight_sync.upload_as_views", "a colocated sync hands the weights to Ray as byte views, not pickles",
          TRINITY, {TRINITY_FSDP: "rftkit.trainer.weight_sync:send_uploads_as_views"},
          {f"{TRINITY_FSDP}:fsdp_upload_state_dict":
           ("synchronizer.set_model_state_dict.remote(state_dict, global_step)",)},
          ("colocated",)),
    Patch("weight_sync.synchronizer_views", "the Synchronizer hands the weights to the engine as byte views",
          TRINITY, {SYNCHRONIZER: "rftkit.trainer.weight_sync:synchronizer_sends_views"},
          {f"{SYNCHRONIZER}:Synchronizer.get_model_state_dict_iterator": ("yield item",),
           f"{SYNCHRONIZER}:Synchronizer.get_model_state_dict": ("return self.model_state_dict, self.model_version",)},
          ("colocated",)),
    Patch("checks.verl_version", "Trinity's config checks read verl's version from its metadata, without importing "
          "verl (seconds of every dry run)", TRINITY,
          {"trinity.trainer.trainer": "rftkit.check_patches:verl_version_from_metadata"},
          {"trinity.trainer.trainer:is_verl_legacy": ("import verl", '"0.8.0"'), "trinity.trainer:is_verl_legacy": ()},
          ("launcher",)),
    Patch("checks.kimi_on_first_call", "Trinity's Kimi-VL decorator imports transformers when first called, not "
          "when its module is (a second of every dry run)", TRINITY,
          {"trinity.common.patch": "rftkit.check_patches:kimi_patch_on_first_call"},
          {"trinity.common.patch:kimi_vl_monkey_patch_decorator": ("import transformers",)}, ("launcher",)),
    Patch("gguf.parsed_once", "a GGUF's metadata is parsed once, not three times, while transformers converts it",
          {"gguf": "0.19.0", "transformers": "5.24.0"}, {},
          {"gguf:GGUFReader": (), "gguf:get_tensor_name_map": ()}, ("gguf conversion",),
          requires={"transformers.modeling_gguf_pytorch_utils:":  # looked up by name when called, so replaceable
                    ("from gguf import GGUFReader", "from gguf import MODEL_ARCH_NAMES, get_tensor_name_map")}),
)


def nothing_to_install(module) -> None:
    """An installer for a module where a patch only checks what it relies on (its `requires` there)."""
