"""Padding-free attention for the trainer without the flash-attn package.

With padding removal on, verl packs a micro-batch's sequences into one row and Trinity passes
their boundaries as `cu_seq_lens_q` / `max_length_q`, which plain sdpa ignores: packed sequences
would attend across each other. The attention function registered here, `NAME`, keeps them
apart: on CUDA with `torch.nn.attention.varlen.varlen_attn` (PyTorch's FlashAttention-2 kernels,
torch >= 2.10), elsewhere with causal sdpa one sequence at a time, so the plumbing can be tested on
a CPU. Key and value heads are repeated for grouped-query attention unless `varlen_attn` takes
`enable_gqa`. The name must not contain "flash" (transformers would fetch a hub kernel). A padded
batch has no boundaries to read and is refused.

Under Ulysses sequence parallelism each rank holds a slice of the packed row, and verl inserts its
all-to-alls only into flash-attn's `_flash_attention_forward`, which this function never calls. So
it makes them itself, with verl's autograd-aware helpers: all heads of the local tokens to a share
of the heads over the whole row, attention on the whole row's boundaries, and back. The group
comes from `verl.utils.ulysses`; where that was never imported, the group is 1.
"""

from __future__ import annotations

import functools
import inspect
import sys

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from rftkit.trainer import VARLEN_ATTENTION

NAME = VARLEN_ATTENTION  # registered with transformers under this name

_ends = WeakIdKeyDictionary()  # cu_seqlens tensor -> (its last boundary, its longest sequence)


@functools.cache
def _varlen_kernel():
    """(varlen_attn, takes enable_gqa, causal keyword) of this torch, or None where it has none. Looked up on
    the first call: importing it brings in torch._dynamo, seconds that a process which never runs it skips."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    # torch 2.10 spells causal `is_causal=True`; 2.11 and later, `window_size=(-1, 0)`.
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    return varlen_attn, "enable_gqa" in params, causal



def boundaries(kwargs: dict, total: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """(cu_seqlens as int32 on `device`, longest sequence) of a packed row of `total` tokens.

    Taken from `cu_seq_lens_q`/`max_length_q` when the caller passes them (Trinity's trainer
    does), else from `position_ids`, where every sequence starts again at position 0.
    """
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        positions = kwargs.get("position_ids")
        if positions is None:
            cu = torch.tensor([0, total], device=device)
        else:
            starts = torch.nonzero(positions.reshape(-1)[:total] == 0).flatten()
            if starts.numel() == 0 or starts[0] != 0:
                starts = torch.cat([starts.new_zeros(1), starts])
            cu = torch.cat([starts, starts.new_tensor([total])])
    cu = cu.to(device=device, dtype=torch.int32)
    # Every layer sees the same cu_seqlens tensor: read it back from the GPU once, to check that it
    # covers the row (with sp > 1, boundaries of one rank's shard or of the unpadded row would
    # leave tokens unattended) and to find its longest sequence.
    if cu not in _ends:
        edges = cu.tolist()
        _ends[cu] = edges[-1], max(end - start for start, end in zip(edges, edges[1:]))
    end, longest = _ends[cu]
    if end != total:
        raise ValueError(f"attention {NAME!r}: sequence boundaries end at {end}, the packed row has {total} tokens")
    given = kwargs.get("max_length_q")
    return cu, int(longest if given is None or isinstance(given, torch.Tensor) else given)


def _ulysses():
    """verl's `verl.utils.ulysses` while its sequence-parallel group spans more than one rank, else None."""
    ulysses = sys.modules.get("verl.utils.ulysses")  # only this module sets the group: not imported, no group
    if ulysses is None or ulysses.get_ulysses_sequence_parallel_world_size() <= 1:
        return None
    return ulysses


def _per_sequence_sdpa(q, k, v, cu: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Causal sdpa on each sequence of a packed (tokens, heads, dim) batch: the reference path."""
    out = torch.empty_like(q)
    edges = cu.tolist()
    for start, end in zip(edges, edges[1:]):
        # (tokens, heads, dim) -> (1, heads, tokens, dim) for sdpa
        qs, ks, vs = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)[0].transpose(0, 1)
    return out


def varlen_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     sliding_window: int | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface: (batch, heads, tokens, dim) in, (batch, tokens, heads, dim) out."""
    if query.shape[0] != 1 or attention_mask is not None:
        raise ValueError(
            f"attention {NAME!r} runs on packed micro-batches only (one row, no padding mask), got "
            f"{query.shape[0]} row(s){' and a padding mask' if attention_mask is not None else ''}: "
            f"set trainer.use_remove_padding: true, or choose another attention (--attn sdpa)")
    if sliding_window is not None:
        raise ValueError(f"attention {NAME!r} has no sliding-window support (layer asks for {sliding_window})")
    if dropout:
        raise ValueError(f"attention {NAME!r} has no dropout (got {dropout}); the trainer uses none")
    # verl takes a call without position_ids for a vision tower, whose input is not split across ranks
    ulysses = _ulysses() if kwargs.get("position_ids") is not None else None
    if ulysses is not None:
        sp = ulysses.get_ulysses_sequence_parallel_world_size()
        if key.shape[1] < sp:
            # all-to-all hands each rank heads / sp of every tensor: repeat kv heads so that there are sp of them
            key, value = (t.repeat_interleave(sp // key.shape[1], dim=1) for t in (key, value))
        # (1, heads, tokens / sp, dim) -> (1, heads / sp, tokens, dim)
        query, key, value = (ulysses.gather_seq_scatter_heads(t, seq_dim=2, head_dim=1) for t in (query, key, value))
        if kwargs.get("cu_seq_lens_q") is None:
            positions = kwargs["position_ids"].contiguous()
            shards = [torch.empty_like(positions) for _ in range(sp)]
            torch.distributed.all_gather(shards, positions, group=ulysses.get_ulysses_sequence_parallel_group())
            kwargs = {**kwargs, "position_ids": torch.cat(shards, dim=-1)}
    total = query.shape[2]
    cu, longest = boundaries(kwargs, total, query.device)
    # (1, heads, tokens, dim) -> (tokens, heads, dim), as the varlen kernels take them
    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))
    groups = q.shape[1] // k.shape[1]
    kernel = _varlen_kernel() if q.is_cuda else None
    gqa_in_kernel = kernel is not None and kernel[1]
    if groups > 1 and not gqa_in_kernel:
        # head h of the query reads key/value head h // groups, as transformers' repeat_kv lays them out
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    if kernel is not None:
        varlen_attn, _, causal = kernel
        extra = {"enable_gqa": True} if groups > 1 and gqa_in_kernel else {}
        out = varlen_attn(q, k, v, cu, cu, longest, longest, scale=scaling, **causal, **extra)
    else:
        out = _per_sequence_sdpa(q, k, v, cu, scaling)
    out = out.unsqueeze(0)
    if ulysses is not None:
        # (1, tokens, heads / sp, dim) -> (1, tokens / sp, heads, dim)
        out = ulysses.gather_heads_scatter_seq(out, head_dim=2, seq_dim=1)
    return out, None


def keep_out_of_checkpoints(model_config_module) -> None:
    """Keep the trainer's attention out of the config.json of its checkpoints.

    verl's `HFModelConfig` loads the model config with the configured attention and then copies every
    `override_config` key onto it as a plain attribute, `attn_implementation` included, which
    `save_pretrained` writes out: a checkpoint would name an attention that only a process with
    this module (`NAME`), or with flash-attn (`flash_attention_2`), can load. The model keeps its
    attention (transformers reads `_attn_implementation`); the copy goes, so a checkpoint loads
    anywhere with transformers' default attention.
    """
    from rftkit.patches.apply import replace

    def attention_kept_out(post_init):
        def __post_init__(self):
            post_init(self)
            if "attn_implementation" in vars(self.hf_config):
                del self.hf_config.attn_implementation
        return __post_init__

    replace("attention.out_of_checkpoints", model_config_module, "HFModelConfig.__post_init__", attention_kept_out)


def register(modeling_utils=None) -> None:
    """Make `NAME` a valid `attn_implementation` in this process (given transformers.modeling_utils, or
    importing it)."""
    if modeling_utils is None:
        from transformers import modeling_utils
    modeling_utils.AttentionInterface.register(NAME, varlen_attention)
