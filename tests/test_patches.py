"""The table of runtime patches (rftkit.patches) against the installed packages and the project's code: every
guard holds in the pinned versions, nothing is replaced that the table does not declare, patches of one method
stack in either order, and docs/patches.md is the table."""

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, as_module
from rftkit.patches import FSDP_ENGINE, PATCHES
from rftkit.patches.apply import PatchTargetMoved, applied, replace
from rftkit.patches.page import markdown
from experiments.trainer_speed import layer_levers
from rftkit.trainer import ref_model

PROCESSES = {"worker", "colocated", "launcher", "vllm server", "gguf conversion", "trainer benchmark"}
GUARDS = [(patch.name, key, text) for patch in PATCHES.values()
          for guards in (patch.replaces, patch.requires) for key, texts in guards.items() for text in texts]


def source_in_files(key: str) -> str | None:
    """The source of `key` ("module:Class.method") as its installed file has it, found without importing the
    module (vLLM's engine does not import on a CPU machine); None where the file does not define it."""
    module, _, path = key.partition(":")
    text = Path(importlib.util.find_spec(module).origin).read_text()
    node = ast.parse(text)
    for part in filter(None, path.split(".")):
        node = next((child for child in node.body if getattr(child, "name", None) == part), None)
        if node is None:
            return None
    return ast.get_source_segment(text, node) if path else text


@pytest.mark.parametrize("name,key,text", GUARDS, ids=[f"{name}:{key}:{i}" for i, (name, key, _) in enumerate(GUARDS)])
def test_every_text_a_patch_relies_on_is_in_the_installed_package(name, key, text):
    source = source_in_files(key)
    if source is None:  # defined elsewhere and imported into the module: look it up there
        module, _, path = key.partition(":")
        from rftkit.patches.apply import resolve

        import inspect
        source = inspect.getsource(inspect.unwrap(resolve(importlib.import_module(module), path)))
    assert text in source, f"{name}: {key} no longer has {text!r}"


def test_every_patch_has_a_guard_an_installer_a_switch_and_the_pinned_versions():
    lock = (REPO / "requirements" / "lock-gpu.txt").read_text()
    for patch in PATCHES.values():
        assert any(texts for texts in [*patch.replaces.values(), *patch.requires.values()]), patch.name
        assert set(patch.processes) <= PROCESSES and patch.processes, patch.name
        assert patch.switch.off, patch.name
        for package, version in patch.written_for.items():
            assert f"\n{package}=={version}\n" in lock, f"{patch.name}: {package} {version} is not the pinned version"
        for module, target in patch.install.items():
            home, _, function = target.partition(":")
            assert callable(getattr(importlib.import_module(home), function)), (patch.name, target)
            assert importlib.util.find_spec(module) is not None, (patch.name, module)
        for key in [*patch.replaces, *patch.requires]:
            assert re.fullmatch(r"[\w.]+:[\w.]*", key), (patch.name, key)


def test_a_replacement_the_table_does_not_declare_is_refused():
    engine = type("FSDPEngine", (), {"_build_fsdp_module": lambda self, module: module, "other": lambda self: 0})
    with pytest.raises(RuntimeError, match="'ref_model.on_gpu' replaces .*FSDPEngine.other, which rftkit/patches"):
        replace("ref_model.on_gpu", as_module(FSDP_ENGINE, FSDPEngine=engine), "FSDPEngine.other", lambda f: f)


def test_the_error_names_the_patch_the_versions_and_the_switch():
    with pytest.raises(PatchTargetMoved) as error:
        replace("concurrent_start", as_module("trinity.trainer.verl.trainer", VERLTrainer=type("VERLTrainer", (), {})),
                "VERLTrainer.prepare", lambda f: f)
    assert str(error.value).startswith("rftkit patch 'concurrent_start' (the trainer's FSDP workers are built while ")
    assert "trinity.trainer.verl.trainer.VERLTrainer.prepare is missing" in str(error.value)
    assert "written for trinity-rft 0.6.0 (installed: 0.6.0)" in str(error.value)
    assert str(error.value).endswith("set RFTKIT_CONCURRENT_START=0 in the launch's environment")


@pytest.mark.parametrize("order", [("ref_model", "layer_levers"), ("layer_levers", "ref_model")])
def test_two_patches_of_one_verl_method_stack_in_either_order(order):
    """ref_model.on_gpu and layer_levers both wrap FSDPEngine._build_fsdp_module: each checks the source at the
    bottom of the stack, each is installed once, and a call runs through both."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
    from verl.workers.config.engine import FSDPEngineConfig

    built = []

    class Engine(FSDPEngine):  # verl's, with a builder that records what it is given
        def _build_fsdp_module(self, fsdp_module):
            # as verl 0.8.0: if self.engine_config.offload_policy or self.engine_config.forward_only:
            built.append(self.engine_config.forward_only)
            return fsdp_module

    module = as_module(FSDP_ENGINE, FSDPEngine=Engine)
    install = {"ref_model": lambda: ref_model.keep_on_gpu(module),
               "layer_levers": lambda: layer_levers.before_sharding(module, None, 1)}
    for name in order * 2:  # a second install of each changes nothing
        install[name]()
    assert sorted(applied(Engine.__dict__["_build_fsdp_module"])) == ["layer_levers", "ref_model.on_gpu"]
    assert len(applied(Engine.__dict__["_build_fsdp_module"])) == 2

    class Layer(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Layer(2, 2))
    model._no_split_modules = ["Layer"]
    engine = object.__new__(Engine)
    engine.engine_config = FSDPEngineConfig(strategy="fsdp2", forward_only=True)
    engine.model_config = type("ModelConfig", (), {"use_liger": False})()
    assert engine._build_fsdp_module(model) is model
    assert built == [False], "ref_model's wrapper did not run: the reference model would be offloaded"
    assert engine.engine_config.forward_only is True


def test_docs_patches_md_is_the_table():
    assert (REPO / "docs" / "patches.md").read_text() == markdown(), \
        "regenerate it: python -m rftkit.patches > docs/patches.md"


# Every switch on: the patches of a run's workers (a colocated one), of the launcher and of the vLLM server.
SNAPSHOT = r"""
import importlib, inspect, json, os, sys
os.environ.update({"RFTKIT_CONCURRENT_START": "1", "RFTKIT_EARLY_RUNNERS": "1", "RFTKIT_LEAN_ENGINE": "1",
                   "RFTKIT_WEIGHT_SYNC_DTYPE": "bfloat16", "RFTKIT_STARTUP_TIMELINE": sys.argv[1],
                   "RFTKIT_CHECKPOINT_EVERY": "2"})
from rftkit.patches import PATCHES
from rftkit.patches.apply import MARK, install, resolve
from rftkit.workers import setup_colocated
PACKAGES = ("trinity", "verl", "vllm", "transformers", "peft", "gguf", "ray")
for patch in PATCHES.values():
    for name in [*patch.install, *(key.partition(":")[0] for key in patch.replaces)]:
        try:
            importlib.import_module(name)
        except ImportError:  # vLLM's engine does not import on a CPU machine
            pass

def state():
    found = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith(PACKAGES) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            found[f"{name}:{attr}"] = value
            if inspect.isclass(value) and value.__module__ == name:
                for member, inner in list(vars(value).items()):
                    found[f"{name}:{value.__qualname__}.{member}"] = inner
    return found

before = state()
setup_colocated()
install("launcher")
install("vllm server")
install("trainer benchmark")
after = state()
old_modules = {key.partition(":")[0] for key in before}  # a module imported by the patches themselves: not compared
changed = {key: value for key, value in after.items()
           if key.partition(":")[0] in old_modules and (key not in before or value is not before[key])}
marked = {key: getattr(getattr(value, "__func__", value), MARK, None) for key, value in changed.items()}

def defined_at(key):  # "module:Class.attr" under the module that defines the class
    module, _, path = key.partition(":")
    owner_path, _, attr = path.rpartition(".")
    if not owner_path or module not in sys.modules:
        return key
    owner = resolve(sys.modules[module], owner_path)
    return f"{owner.__module__}:{owner.__qualname__}.{attr}" if inspect.isclass(owner) else key

declared = {defined_at(key): patch.name for patch in PATCHES.values() for key in patch.replaces}
print(json.dumps({"marked": marked, "declared": declared}))
"""


def test_nothing_is_replaced_that_the_table_does_not_declare(tmp_path):
    """Every attribute of Trinity, verl, vLLM and the rest that a run's patches change (all switched on) is one the
    table declares, and carries the name of the patch that declares it."""
    import json

    result = subprocess.run([sys.executable, "-c", SNAPSHOT, str(tmp_path / "timeline.jsonl")], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    marked, declared = found["marked"], found["declared"]
    assert {key: name for key, name in marked.items() if declared.get(key) != name} == {}
    imported = {key for key in declared if not key.startswith("vllm.v1.") and not key.startswith("gguf:")}
    assert imported - set(marked) == set(), "declared, yet not installed with every switch on"


OWN_PACKAGES = ("rftkit", "runkit", "experiments", "frozenlake", "math_bots", "scripts", "benchmarks")


def outside_changes(path: Path) -> list[str]:
    """Where a project file changes another package itself: setattr, a hook on import, or an assignment to an
    attribute of a module (one it imports, or a parameter typed ModuleType)."""
    tree = ast.parse(path.read_text())
    modules = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names if not alias.name.startswith(OWN_PACKAGES)}
    modules |= {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith(OWN_PACKAGES)
                for alias in node.names}
    modules |= {arg.arg for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                for arg in node.args.args if arg.annotation is not None and "ModuleType" in ast.unparse(arg.annotation)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "delattr", "patch_on_import"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno} {ast.unparse(node.func)}")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AugAssign) else []
        for target in targets:
            base = target
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(target, ast.Attribute) and isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {ast.unparse(target)} =")
    return found


def test_no_code_outside_the_patch_helper_changes_another_package():
    allowed = {"rftkit/patches/apply.py",  # the helper itself
               "rftkit/trainer/attention.py"}  # registers an attention with transformers' registry on import
    found = [line for package in OWN_PACKAGES for path in sorted((REPO / package).rglob("*.py"))
             if str(path.relative_to(REPO)) not in allowed for line in outside_changes(path)]
    assert found == []
