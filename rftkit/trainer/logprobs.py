"""Token log-probabilities from logits in a few large kernels, for trainers without flash-attn.

verl computes log p(label) with flash-attn's Triton cross-entropy when it imports, and otherwise
with `logprobs_from_logits_v2`, which loops over the rows of the `(tokens, vocab)` logits in
Python: one `log_softmax` and one `gather` per token, on every micro-batch of the reference pass
and the update. `token_log_probs` computes the same quantity over blocks of rows instead, in
fp32 like flash-attn's kernel, and keeps no fp32 copy of the logits for the backward pass (it
recomputes the softmax of each block there), so a long micro-batch needs no more memory than the
loop did.

`use_in_verl` points verl's fallback at it, inside each trainer process (rftkit.trainer.attention's
worker setup), when flash-attn is absent.
"""

from __future__ import annotations

from types import ModuleType

import torch


# One block of fp32 logits is at most this many elements (1 GiB): 1,766 rows of Qwen's 151,936 tokens.
BLOCK_ELEMENTS = 2 ** 28


class _TokenLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, rows: int) -> torch.Tensor:
        lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for start in range(0, logits.shape[0], rows):
            lse[start:start + rows] = torch.logsumexp(logits[start:start + rows].float(), dim=-1)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float()
        ctx.save_for_backward(logits, labels, lse)
        ctx.rows = rows
        return picked - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        grad = grad.float()
        grad_logits = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ctx.rows):
            end = start + ctx.rows
            # d log p(label) / d logits = onehot(label) - softmax(logits)
            block = torch.exp(logits[start:end].float() - lse[start:end, None])
            block.mul_(-grad[start:end, None])
            block.scatter_add_(1, labels[start:end, None], grad[start:end, None])
            grad_logits[start:end] = block
        return grad_logits, None, None


def token_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] for logits of shape (..., vocab) and labels of shape (...), in fp32."""
    vocab = logits.shape[-1]
    flat_logits, flat_labels = logits.reshape(-1, vocab), labels.reshape(-1)
    rows = max(1, BLOCK_ELEMENTS // vocab)
    return _TokenLogProbs.apply(flat_logits, flat_labels, rows).view(labels.shape)


def use_in_verl(torch_functional: ModuleType) -> None:
    """Make `verl.utils.torch_functional.logprobs_from_logits` fall back to `token_log_probs`.

    That function picks flash-attn's kernel, else NPU's, else `logprobs_from_logits_v2`, which it
    looks up by name when called: replacing that name changes every caller, including modules that
    imported `logprobs_from_logits` itself (rftkit.patches checks that it still calls it so).
    """
    from rftkit.patches.apply import replace

    def in_blocks(original):
        def logprobs_from_logits_v2(logits, labels):
            return token_log_probs(logits, labels)
        return logprobs_from_logits_v2

    replace("logprobs.in_blocks", torch_functional, "logprobs_from_logits_v2", in_blocks)
