"""Training on one GPU: Trinity-RFT's `colocate` mode, with the fix it needs to start in 0.6.0.

Trinity runs its one vLLM engine beside the FSDP trainer on the same GPU: the engine is held to a
quarter of the memory (`explorer.rollout_model.cuda_visible_devices` points it at the GPU), and
the weights reach it through Ray's object store after each step (sync method `memory`,
`rftkit.trainer.weight_sync`).

In Trinity-RFT 0.6.0 the engine allocator asks Ray for a whole GPU for the engine while the
trainer's worker holds the only one, so the run waits forever before its first step (Trinity-RFT
issue #602, fixed after 0.6.0). `engines_reserve_no_gpu` (patch `colocate.engine_without_gpu`), in
every worker of a colocated run, makes the engines the allocator creates reserve CPUs only, as before
0.6, and changes nothing else.
"""

from __future__ import annotations

from types import ModuleType

from rftkit.patches.apply import replace

# Trinity's own cap on the colocated engine's share of GPU memory (its config validator
# lowers anything above it); the trainer has the rest.
ENGINE_MEMORY_SHARE = 0.25


class _ActorsWithoutGpu:
    """The `ray` module as the allocator sees it, except that the actors it creates reserve no GPU."""

    def __init__(self, ray: ModuleType):
        self._ray = ray

    def __getattr__(self, name: str):
        return getattr(self._ray, name)

    def remote(self, actor_class):
        remote_class = self._ray.remote(actor_class)

        class WithoutGpu:
            @staticmethod
            def options(**options):
                return remote_class.options(**{**options, "num_gpus": 0})

        return WithoutGpu


def engines_reserve_no_gpu(allocator: ModuleType) -> None:
    """Make Trinity's allocator module create engines, and their placement-group bundles, without a Ray GPU."""
    def without_gpu(allocate_bundles):
        def bundles_without_gpu(self):
            result = allocate_bundles(self)
            for bundle in result.bundles:
                bundle.pop("GPU", None)
            return result
        return bundles_without_gpu

    replace("colocate.engine_without_gpu", allocator, "Allocator.allocate_bundles", without_gpu)
    replace("colocate.engine_without_gpu", allocator, "ray", _ActorsWithoutGpu)
