"""The launcher's patches to Trinity-RFT's config checks (declared in rftkit.patches, "checks.*"): they run
without importing verl or transformers, seconds of every dry run; and, while a dry run validates without GPUs,
the GPU memory check's NO GPU DETECTED banner is not logged."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import sys
from types import ModuleType

from rftkit.patches.apply import install, replace, source_has


def verl_version_from_metadata(trainer_module: ModuleType) -> None:
    """Make Trinity's `is_verl_legacy()` read verl's version from the package's metadata: the same answer,
    without importing verl (and torch's compiler through tensordict), seconds of every dry run."""
    def from_metadata(original):
        def is_verl_legacy() -> bool:
            from packaging.version import Version

            try:
                return Version(importlib.metadata.version("verl")) < Version("0.8.0")
            except importlib.metadata.PackageNotFoundError:
                return False
        return is_verl_legacy

    original = trainer_module.is_verl_legacy
    replace("checks.verl_version", trainer_module, "is_verl_legacy", from_metadata)
    package = sys.modules.get("trinity.trainer")  # which re-exports it
    if package is not None and getattr(package, "is_verl_legacy", None) is original:
        replace("checks.verl_version", package, "is_verl_legacy", lambda original: trainer_module.is_verl_legacy)


def kimi_patch_on_first_call(package: ModuleType) -> None:
    """Make Trinity's `kimi_vl_monkey_patch_decorator` decorate when the function is first called, not
    when its class is defined: it imports transformers to read its version, a second of every dry run,
    for a check that runs only on a GPU. The same decoration, later."""
    def on_first_call(original):
        def kimi_vl_monkey_patch_decorator(func):
            decorated = None

            @functools.wraps(func)
            def call(*args, **kwargs):
                nonlocal decorated
                if decorated is None:
                    decorated = original(func)
                return decorated(*args, **kwargs)
            return call
        return kimi_vl_monkey_patch_decorator

    replace("checks.kimi_on_first_call", package, "kimi_vl_monkey_patch_decorator", on_first_call)


NO_GPU_BANNER = "NO GPU DETECTED"  # the title of the box GPUMemoryValidator logs, as of Trinity-RFT 0.6.0


class DropNoGpuBanner(logging.Filter):
    """Drops a log record that holds Trinity's NO GPU DETECTED banner; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return NO_GPU_BANNER not in record.getMessage()


@contextlib.contextmanager
def no_gpu_banner(validator=None):
    """While this runs, Trinity-RFT 0.6.0's GPU memory check (`validator`) does not log its NO GPU DETECTED
    banner, an error that a dry run without GPUs expects; all else shows. Fails if the check has moved."""
    if validator is None:
        install("launcher")
        from trinity.common.config_validator import GPUMemoryValidator, validators

        validator = next((v for v in validators if isinstance(v, GPUMemoryValidator)), None)
    check = getattr(type(validator), "validate_trainer_memory_usage", None)
    if not (source_has(check, f'"{NO_GPU_BANNER}"') and source_has(check, "self.logger.error(")):
        raise RuntimeError(f"rftkit.check_patches: Trinity's GPU memory check no longer logs its "
                           f"{NO_GPU_BANNER} banner as in Trinity-RFT 0.6.0, which no_gpu_banner was written for")
    drop = DropNoGpuBanner()
    validator.logger.addFilter(drop)  # on the logger, not its handlers: Trinity's get_logger() replaces those
    try:
        yield
    finally:
        validator.logger.removeFilter(drop)
