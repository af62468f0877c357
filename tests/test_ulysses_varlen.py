"""The packed attention under verl's Ulysses sequence parallelism, on CPU: two gloo processes against one.

Each rank gets its slice of a packed row as Trinity's trainer cuts it (`ulysses_pad_and_slice_inputs`, and
`cu_seq_lens_q` of the whole padded row with the pad added to the last sequence), or position ids only. The
ranks' logits put together, and their parameter gradients summed, must be those of the whole row run in one
process. A model with one kv head, fewer than the two ranks, takes verl's repeat path. A control runs the
same slices with sp treated as 1, to show that these comparisons catch attention confined to a rank's slice.
"""

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoConfig, AutoModelForCausalLM

from rftkit.trainer import packed_attention
from runkit.serving import free_port

ulysses = pytest.importorskip("verl.utils.ulysses")
packed_attention.register()
WORLD = 2
LENGTHS = (7, 12, 4)  # 23 tokens: the row is padded by one for two ranks, and sequence 2 spans both
KV_HEADS = (2, 1)  # 4 query heads; 1 kv head is fewer than the ranks
VOCAB = 300
CASES = ("cu_seq_lens (Trinity's trainer)", "position ids only")


def save_model(kv_heads: int, path) -> None:
    config = AutoConfig.for_model("qwen2", vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=kv_heads)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)


def load_model(path):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=packed_attention.NAME, dtype=torch.float32)


def packed_row():
    """(input ids, position ids, cu_seqlens, loss weights) of the whole row, the same in every process."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (1, sum(LENGTHS)), generator=generator)
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    weights = torch.randn(1, sum(LENGTHS), VOCAB, generator=generator)
    return ids, positions, cu, weights


def boundary_kwargs(cu):
    longest = cu.diff().max()
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def forward_backward(model, ids, positions, extra, weights):
    """(logits, {parameter: gradient}) of a weighted sum of the logits, a loss every token contributes to."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False, **extra).logits
    (logits * weights).sum().backward()
    return logits.detach()[0], {name: p.grad.clone() for name, p in model.named_parameters()}


def worker(rank: int, port: int, folder) -> None:
    torch.set_num_threads(1)  # a forked child must not reuse the parent's OpenMP pool (as DataLoader workers)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))
    ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
    ids, positions, cu, weights = packed_row()
    # as Trinity's prepare_model_inputs: pad to a multiple of sp, slice, and extend the last sequence by the pad
    ids, positions, pad = ulysses.ulysses_pad_and_slice_inputs(ids, position_ids_rmpad=positions, sp_size=WORLD)
    cu = cu.clone()
    cu[-1] += pad
    weights = ulysses.slice_input_tensor(weights, dim=1)  # the pad's logits weigh nothing
    results = {}
    for kv_heads in KV_HEADS:
        model = load_model(folder / f"kv{kv_heads}")
        for case, extra in zip(CASES, (boundary_kwargs(cu), {})):
            results[kv_heads, case] = forward_backward(model, ids, positions, extra, weights)
        ulysses.set_ulysses_sequence_parallel_group(None)  # sp treated as 1 on the sliced input
        results[kv_heads, "no all-to-all"] = forward_backward(model, ids, positions, {}, weights)
        try:
            forward_backward(model, ids, positions, boundary_kwargs(cu), weights)
            results[kv_heads, "no all-to-all, cu_seq_lens"] = "accepted"
        except ValueError as exc:
            results[kv_heads, "no all-to-all, cu_seq_lens"] = str(exc)
        ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
    torch.save(results, folder / f"rank{rank}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """(results of rank 0, of rank 1, {kv heads: logits and gradients of the whole row in this process})."""
    folder = tmp_path_factory.mktemp("ulysses")
    for kv_heads in KV_HEADS:
        save_model(kv_heads, folder / f"kv{kv_heads}")
    # forked, not spawned: each spawned rank would import torch, transformers and verl again (20 s on 2 cores)
    context = mp.start_processes(worker, args=(free_port(), folder), nprocs=WORLD, join=False, start_method="fork")
    deadline = time.monotonic() + 120
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two ranks did not finish in 120 s")
    ids, positions, cu, weights = packed_row()
    whole = {kv: forward_backward(load_model(folder / f"kv{kv}"), ids, positions, boundary_kwargs(cu), weights)
             for kv in KV_HEADS}
    return [torch.load(folder / f"rank{rank}.pt") for rank in range(WORLD)], whole


def put_together(ranks, key):
    """The ranks' logits, in order and without the pad, and their gradients summed."""
    logits = torch.cat([rank[key][0] for rank in ranks])[:sum(LENGTHS)]
    grads = {name: sum(rank[key][1][name] for rank in ranks) for name in ranks[0][key][1]}
    return logits, grads


def max_grad_error(grads, want) -> float:
    return max(float((grads[name] - want[name]).abs().max()) for name in want)


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("case", CASES)
def test_two_ranks_compute_what_one_process_computes(runs, kv_heads, case):
    ranks, whole = runs
    logits, grads = put_together(ranks, (kv_heads, case))
    want_logits, want_grads = whole[kv_heads]
    assert torch.allclose(logits, want_logits, atol=1e-5), (logits - want_logits).abs().max()
    assert grads.keys() == want_grads.keys()
    # gradients reach ~70 here: float32 sums taken in another order differ in the last bits
    mismatched = [name for name, want in want_grads.items()
                  if not torch.allclose(grads[name], want, rtol=1e-5, atol=1e-5)]
    assert not mismatched, (mismatched, max_grad_error(grads, want_grads))


@pytest.mark.parametrize("kv_heads", KV_HEADS)
def test_without_the_all_to_all_a_rank_attends_only_to_its_slice(runs, kv_heads):
    """The comparisons above would catch it: sequence 2 loses its first tokens on rank 1, and boundaries of the
    whole row do not fit one rank's slice."""
    ranks, whole = runs
    logits, grads = put_together(ranks, (kv_heads, "no all-to-all"))
    want_logits, want_grads = whole[kv_heads]
    assert (logits - want_logits).abs().max() > 1e-2
    assert max_grad_error(grads, want_grads) > 1e-2
    for rank in ranks:
        assert rank[kv_heads, "no all-to-all, cu_seq_lens"] == \
            f"attention {packed_attention.NAME!r}: sequence boundaries end at 24, the packed row has 12 tokens"
