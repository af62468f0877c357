"""How fast a state dict of bf16 tensors crosses Ray's object store, as Trinity's memory sync sends it.

    python benchmarks/weight_sync_transport.py                 # 1 GiB in 100 tensors
    python benchmarks/weight_sync_transport.py --gib 6 --tensors 435   # a 3B model in bf16

Trinity's colocated sync hands the trainer's whole state dict to the Synchronizer actor in one
call (`ray.get(synchronizer.set_model_state_dict.remote(state_dict, step))`), and the engine then
fetches it tensor by tensor from the actor's streaming generator. This measures both halves,
twice in one process: with Ray's default serialization of torch tensors, and with the byte views
a colocated run uses (`rftkit.trainer.weight_sync`), which Ray writes to its object store without
pickling the bytes. It prints the seconds and the ratio, and checks that the tensors arrive
unchanged. CPU only.
"""

from __future__ import annotations

import time

import ray
import torch

from rftkit.trainer import weight_sync
from rftkit.cli import ArgumentParser, above, at_least


@ray.remote
class Holder:
    """The Synchronizer's two methods that the memory sync uses."""

    def __init__(self, numpy_views: bool):
        if numpy_views:  # what it yields to the engine is serialized here
            weight_sync.register_views()

    def set(self, state: dict) -> int:
        self.state = state
        return len(state)

    def items(self):
        for item in self.state.items():  # as Synchronizer.get_model_state_dict_iterator
            yield item


def transfer(state: dict, numpy_views: bool) -> tuple[float, float, bool]:
    """(upload seconds, fetch seconds, whether every tensor arrived equal) for one pass."""
    holder = Holder.remote(numpy_views)
    started = time.perf_counter()
    ray.get(holder.set.remote(state))
    upload = time.perf_counter() - started
    started = time.perf_counter()
    fetched = [ray.get(ref) for ref in holder.items.remote()]
    fetch = time.perf_counter() - started
    same = len(fetched) == len(state) and all(torch.equal(tensor, state[name]) for name, tensor in fetched)
    ray.kill(holder)
    return upload, fetch, same


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=above(0), default=1.0, help="size of the state dict (default: %(default)s)")
    parser.add_argument("--tensors", type=at_least(1), default=100, help="tensors in it (default: %(default)s)")
    args = parser.parse_args(argv)
    numel = int(args.gib * 2 ** 30 / 2 / args.tensors)
    state = {f"layer{i}.weight": torch.randn(numel).to(torch.bfloat16) for i in range(args.tensors)}
    ray.init(include_dashboard=False, logging_level="ERROR", object_store_memory=int(max(2, 3 * args.gib) * 2 ** 30))
    results = {"default": transfer(state, numpy_views=False)}
    with weight_sync.tensors_as_views():  # the upload is serialized in this process
        results["numpy views"] = transfer(state, numpy_views=True)
    ray.shutdown()
    for name, (upload, fetch, same) in results.items():
        print(f"{name:12s} upload {upload:6.2f} s ({args.gib / upload:5.2f} GiB/s), fetch {fetch:6.2f} s, "
              f"tensors unchanged: {same}")
    print(f"upload, default / numpy views: {results['default'][0] / results['numpy views'][0]:.1f}x")
    return 0 if all(same for _, _, same in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
