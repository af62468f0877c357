"""The project's Trinity-RFT plugins, and how every process of a run gets them from the project itself.

`resumable_bots.py` is the BOTS selector that keeps its posteriors across a restart. Trinity's own
way in, a folder in TRINITY_PLUGIN_DIRS, copies each plugin file into the installed
`trinity/plugins/` folder, where a stale copy outlives the run and is loaded by every later
`trinity run`. Instead, these modules are imported by name: in the launching process by
`load()`, and in each Ray worker right after Trinity's `load_plugins()`, the call with which
Trinity-RFT 0.6.0's actors load plugins (`after_trinity_loads_plugins`, rftkit.patches). A module
imported by name is found again by name when one of its objects is unpickled in another process.

RFTKIT_PLUGINS adds modules, comma-separated (the GPU smoke's fault plugin:
`tests.gpu.faults.smoke_faults`); they must be importable in the workers too.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

MODULES = ("rftkit.trinity_plugins.resumable_bots",)
EXTRA_ENV = "RFTKIT_PLUGINS"
# What earlier versions of this project let Trinity copy into trinity/plugins/, and a line each copy holds.
STALE_COPIES = {"resumable_bots.py": "`difficulty_based_resumable`: Trinity's BOTS selector",
                "smoke_faults.py": "Faults on purpose, for `python -m tests.gpu.smoke --fault`"}


def modules() -> list[str]:
    """The plugin modules of this process: the project's, then RFTKIT_PLUGINS'."""
    extra = [name.strip() for name in os.environ.get(EXTRA_ENV, "").split(",") if name.strip()]
    return [*MODULES, *extra]


def load() -> None:
    """Import every plugin module here: each registers itself with Trinity's registries."""
    for name in modules():
        importlib.import_module(name)


def remove_stale_copies(loader: ModuleType) -> list[str]:
    """Delete the copies of this project's plugins that Trinity's loader left in trinity/plugins/ (for
    earlier versions of this project), so that no actor loads them; returns the paths removed."""
    folder = os.path.join(os.path.dirname(os.path.dirname(loader.__file__)), "plugins")
    removed = []
    for name, marker in STALE_COPIES.items():
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as copy:
                if marker not in copy.read():  # a file of that name that is not ours: leave it
                    continue
            os.remove(path)
        except OSError:  # absent, or a read-only install: nothing to do
            continue
        removed.append(path)
    return removed


def after_trinity_loads_plugins(loader: ModuleType) -> None:
    """Patch Trinity-RFT 0.6.0's `load_plugins()`: then import this project's plugin modules. Installed in every
    worker of a run (rftkit.patches) before Trinity's actor modules import `load_plugins` by name, so that they
    get this one."""
    from rftkit.patches.apply import replace

    def loads_ours_too(original):
        def load_plugins(*args, **kwargs):
            result = original(*args, **kwargs)
            load()
            return result
        return load_plugins

    replace("plugins.after_trinitys", loader, "load_plugins", loads_ours_too)
