"""How the project changes Trinity-RFT, verl, vLLM and the rest at run time: the one way, for every patch
that the table in `rftkit.patches` declares.

* `install(process)` asks, for each patch declared for that kind of process and switched on, to run its
  installer when the module it names is imported (`patch_on_import`): Ray's worker setup hook runs
  before a worker knows which modules it will use, and importing them all up front would load verl and
  vLLM where they are not needed.
* an installer replaces an attribute with `replace`, and only one its patch declares. The source of what
  it replaces (and the rest of what the patch relies on, `require`) is checked first against the texts
  the table gives; if one has moved, the process stops with `PatchTargetMoved`, which names the patch,
  the versions it was written for and installed, and its off switch.
* a replacement wraps the attribute it replaces (`functools.wraps`) and carries the patch's name, so a
  second install is a no-op and several patches of one method stack in any order: each checks the
  source of the original at the bottom of the stack, not its neighbour's wrapper.
"""

from __future__ import annotations

import builtins
import functools
import importlib.abc
import importlib.metadata
import importlib.util
import inspect
import sys
from types import ModuleType
from typing import Callable

from rftkit.patches import PATCHES, Patch

MARK = "__rftkit_patch__"  # on a replacement: the name of the patch that put it there


class PatchTargetMoved(RuntimeError):
    """What a patch relies on is not in the installed package any more."""


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
    """Whether the source of `func` (a function, class or module) contains `text`."""
    try:
        return text in inspect.getsource(func)
    except (TypeError, OSError):  # None, a builtin, or no source file
        return False


def installed_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def moved(patch: Patch, what: str) -> PatchTargetMoved:
    """The one error of a patch whose target has moved: which patch, what moved, the versions, the switch."""
    versions = ", ".join(f"{package} {version} (installed: {installed_version(package)})"
                         for package, version in patch.written_for.items())
    return PatchTargetMoved(f"rftkit patch {patch.name!r} ({patch.why}): {what}. It was written for {versions}; "
                            f"check it against the installed code (docs/patches.md), or {patch.switch.off}")


def resolve(module: ModuleType, path: str):
    """`module`'s object at `path` ("Class.method", "function"; "" for the module itself), or None."""
    found = module
    for part in filter(None, path.split(".")):
        found = inspect.getattr_static(found, part, None)
        if isinstance(found, (classmethod, staticmethod)):
            found = found.__func__
        if found is None:
            return None
    return found


def _check(patch: Patch, module: ModuleType, guards: dict[str, tuple[str, ...]]) -> None:
    for key, texts in guards.items():
        name, _, path = key.partition(":")
        if name != module.__name__:
            continue
        target = resolve(module, path)
        original = inspect.unwrap(target) if callable(target) else target
        for text in texts:
            if not source_has(original, text):
                where = f"{name}.{path}" if path else name
                raise moved(patch, f"{where} is missing" if target is None else f"{where} no longer has `{text}`")


# (patch, id(module)) -> the module, whose `requires` held; kept, so that its id is not another module's later
_required: dict[tuple[str, int], ModuleType] = {}


def require(name: str, module: ModuleType) -> None:
    """Check what patch `name` relies on in `module` besides what it replaces (its `requires` there), once per
    module: an installer and each of its replacements ask."""
    if (name, id(module)) not in _required:
        _check(PATCHES[name], module, PATCHES[name].requires)
        _required[(name, id(module))] = module


def applied(value) -> list[str]:
    """The patches stacked on `value`, the outermost first."""
    names = []
    while value is not None:
        if MARK in getattr(value, "__dict__", {}):
            names.append(value.__dict__[MARK])
        value = getattr(value, "__wrapped__", None)
    return names


def replace(name: str, module: ModuleType, path: str, make: Callable) -> Callable[[], None]:
    """Replace the attribute at `path` of `module` with `make(current)`, as patch `name` declares it (its
    `replaces`), after checking what the patch relies on in `module`. A replacement of a function wraps it:
    it gets its name, docstring and `__wrapped__`, and the patch's mark. Nothing happens if the patch is
    there already. Returns what undoes it (the replacement is only for a while, as for a GGUF conversion)."""
    patch = PATCHES[name]
    key = f"{module.__name__}:{path}"
    if key not in patch.replaces:
        raise RuntimeError(f"rftkit.patches.apply: patch {name!r} replaces {key}, which rftkit/patches/__init__.py "
                           f"does not declare for it")
    owner_path, _, attr = path.rpartition(".")
    owner = resolve(module, owner_path) if owner_path else module
    static = inspect.getattr_static(owner, attr, None)
    kind = type(static) if isinstance(static, (classmethod, staticmethod)) else None
    current = static.__func__ if kind else static
    if name in applied(current):
        return lambda: None
    if current is None and not hasattr(builtins, attr):  # (a module's own `open` shadows the builtin)
        raise moved(patch, f"{module.__name__}.{path} is missing")
    _check(patch, module, {key: patch.replaces[key]})
    require(name, module)
    replacement = make(current)
    if inspect.isroutine(current) and inspect.isfunction(replacement):
        functools.update_wrapper(replacement, current)  # the neighbour's mark, copied along, is overwritten next
    elif current is not None:
        replacement.__wrapped__ = current
    setattr(replacement, MARK, name)
    had = attr in vars(owner)
    setattr(owner, attr, kind(replacement) if kind else replacement)

    def undo() -> None:
        if had:
            setattr(owner, attr, static)
        else:
            delattr(owner, attr)

    return undo


def installer(patch: Patch, module_name: str) -> Callable[[ModuleType], None]:
    """The function that installs `patch` in module `module_name` once it is imported, its guards first."""
    target, _, function = patch.install[module_name].partition(":")

    def install_in(module: ModuleType) -> None:
        require(patch.name, module)
        getattr(importlib.import_module(target), function)(module)

    return install_in


def install_one(name: str) -> None:
    """Ask for patch `name` alone, whatever its processes and switch (a benchmark's setting)."""
    patch = PATCHES[name]
    for module_name in patch.install:
        patch_on_import(module_name, installer(patch, module_name))


def install(process: str) -> None:
    """Ask for every patch declared for `process` and switched on here, each when its module is imported."""
    for patch in PATCHES.values():
        if process in patch.processes and patch.switch.on():
            install_one(patch.name)
