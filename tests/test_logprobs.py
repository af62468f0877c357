"""rftkit.trainer.logprobs: token log-probabilities in blocks, and the patch that hands them to verl."""

import types

import pytest
import torch

from rftkit.patches.apply import PatchTargetMoved, applied
from rftkit.trainer import logprobs


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 rows over a 50-token vocabulary: the row loop's edges are exercised on small tensors."""
    monkeypatch.setattr(logprobs, "BLOCK_ELEMENTS", 7 * 50)


def reference(logits, labels):
    return torch.log_softmax(logits.double(), dim=-1).gather(-1, labels[..., None]).squeeze(-1)


def test_values_and_gradients_match_log_softmax(small_blocks):
    torch.manual_seed(0)
    logits = (torch.randn(3, 11, 50) * 4).requires_grad_()  # 33 rows: four full blocks and a partial one
    labels = torch.randint(0, 50, (3, 11))
    weights = torch.randn(3, 11)
    got = logprobs.token_log_probs(logits, labels)
    assert got.shape == labels.shape and got.dtype == torch.float32
    assert torch.allclose(got.double(), reference(logits, labels), atol=1e-5)
    (grad,) = torch.autograd.grad((got * weights).sum(), logits)
    (want,) = torch.autograd.grad((reference(logits, labels) * weights).sum(), logits)
    assert torch.allclose(grad.double(), want.double(), atol=1e-6)


def test_bf16_logits_give_fp32_log_probs_and_bf16_gradients(small_blocks):
    torch.manual_seed(1)
    logits = torch.randn(20, 50, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 50, (20,))
    got = logprobs.token_log_probs(logits, labels)
    assert got.dtype == torch.float32
    # computed from the same bf16 values
    assert torch.allclose(got.double(), reference(logits.float(), labels), atol=1e-5)
    got.sum().backward()
    assert logits.grad.dtype == torch.bfloat16


def test_verl_falls_back_to_the_block_kernel_once_patched():
    import verl.utils.torch_functional as verl_functional

    original = verl_functional.logprobs_from_logits_v2
    try:
        logprobs.use_in_verl(verl_functional)
        logits, labels = torch.randn(6, 40), torch.randint(0, 40, (6,))
        assert applied(verl_functional.logprobs_from_logits_v2) == ["logprobs.in_blocks"]
        assert torch.allclose(verl_functional.logprobs_from_logits(logits, labels).double(),
                              reference(logits, labels), atol=1e-5)
        blocks = logprobs.token_log_probs(logits, labels)
        assert torch.equal(verl_functional.logprobs_from_logits(logits, labels), blocks)
    finally:
        verl_functional.logprobs_from_logits_v2 = original


def test_a_verl_that_no_longer_falls_back_this_way_stops_the_worker():
    moved = types.ModuleType("verl.utils.torch_functional")

    def logprobs_from_logits(logits, labels):  # a later verl that computes it some other way
        return logits.log_softmax(-1).gather(-1, labels[..., None])

    moved.logprobs_from_logits = logprobs_from_logits
    moved.logprobs_from_logits_v2 = lambda logits, labels: None
    with pytest.raises(PatchTargetMoved, match="'logprobs.in_blocks'.*logprobs_from_logits no longer has.*verl 0.8.0"):
        logprobs.use_in_verl(moved)
