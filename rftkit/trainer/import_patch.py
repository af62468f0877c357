"""Patch a module of another package in a process that has not imported it yet, once it does.

Ray's worker_process_setup_hook runs in every worker of a run (rollout runners, vLLM
engines, trainer workers) before it knows which modules that worker will use; importing
them all up front would load verl and vLLM where they are not needed. A finder at the front
of `sys.meta_path` lets the import go ahead as usual and applies the patch right after.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
from types import ModuleType
from typing import Callable


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, patch: Callable[[ModuleType], None]):
        self.name, self.patches = name, [patch]

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # find the real module without finding ourselves
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            for patch in self.patches:  # in the order they were asked for
                patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def patch_on_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Call `patch(module)` once module `name` is imported in this process: now, if it already is.
    Patches asked for before the import run after it in the order they were asked for."""
    if name in sys.modules:
        patch(sys.modules[name])
        return
    waiting = next((f for f in sys.meta_path if isinstance(f, _PatchOnImport) and f.name == name), None)
    if waiting is None:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))
    elif patch not in waiting.patches:
        waiting.patches.append(patch)


def source_has(func, text: str) -> bool:
    """Whether the source of `func` contains `text`: how a patch checks that what it patches has not moved."""
    try:
        return text in inspect.getsource(func)
    except (TypeError, OSError):  # None, a builtin, or no source file
        return False
