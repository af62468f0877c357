"""The packed trainer path on a GPU: torch's varlen kernels give the log-probs of padded sdpa (skips without CUDA).

    pytest tests/test_gpu_trainer_path.py

1. The model alone, with the head layouts of the examples' models (Qwen2.5-3B: 16 query heads to 2
   KV heads; Qwen3-0.6B: 16 to 8, with q/k norms), at their full depth, on a batch of mixed
   lengths, without and with autograd. The yardstick is the same weights in fp32 with padded sdpa:
   in bf16, the packed path (rftkit.trainer.packed_attention plus rftkit.trainer.logprobs) must be as close to it
   as padded sdpa in bf16 is (within 10%), and its gradients must point the same way. A control
   packs the same sequences under plain sdpa with a mask of ones, which lets them attend to each
   other: it must land far outside, so that the comparison can tell.
2. The trainer itself: experiments/trainer_speed at two layers compares Trinity's trainer worker's
   reference log-probs on the packed path with the padded path's (same weights, same batch), within
   its LOGPROB_TOLERANCE.
"""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LENGTHS = (5, 37, 300, 1100, 2048, 64)


def build(architecture: str):
    """A random-weight model of the architecture in fp32 on the GPU (the yardstick), and its bf16 copy."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from runkit.tiny_model import ARCHITECTURES
    from rftkit.trainer import packed_attention

    packed_attention.register()
    spec = dict(ARCHITECTURES[architecture])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    with torch.device("cuda"):
        exact = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    return exact, copy.deepcopy(exact).to(torch.bfloat16)


def padded_logprobs(model, sequences):
    tokens = torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True)
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(s) for s in sequences], batch_first=True)
    logits = model(input_ids=tokens, attention_mask=mask, use_cache=False).logits.float()
    out = torch.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return torch.cat([out[i, :len(s) - 1] for i, s in enumerate(sequences)])


def packed_logprobs(model, sequences, boundaries: bool = True):
    from rftkit.trainer.logprobs import token_log_probs

    tokens = torch.cat(sequences)
    positions = torch.cat([torch.arange(len(s), device="cuda") for s in sequences])
    cu = torch.tensor([0, *torch.tensor([len(s) for s in sequences]).cumsum(0).tolist()], device="cuda",
                      dtype=torch.int32)
    # Without boundaries, a mask of ones: transformers then builds no per-sequence mask from the positions.
    extra = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": max(LENGTHS),
             "max_length_k": max(LENGTHS)} if boundaries else {"attention_mask": torch.ones_like(tokens)[None]}
    logits = model(input_ids=tokens[None], position_ids=positions[None], use_cache=False, **extra).logits[0]
    out = token_log_probs(logits, torch.roll(tokens, -1))
    keep = torch.ones_like(tokens, dtype=torch.bool)
    keep[cu[1:] - 1] = False  # each sequence's last token predicts nothing of its own
    return out[keep]


@pytest.mark.parametrize("architecture", ["Qwen2.5-3B", "Qwen3-0.6B"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "autograd"])
def test_packed_log_probs_are_as_exact_as_padded_sdpa_in_bf16(architecture, grad):
    from rftkit.trainer import packed_attention

    exact, model = build(architecture)
    generator = torch.Generator().manual_seed(1)
    sequences = [torch.randint(0, exact.config.vocab_size, (n,), generator=generator).cuda() for n in LENGTHS]
    weights = torch.randn(sum(LENGTHS) - len(LENGTHS), generator=generator).cuda()
    with torch.no_grad():
        want = padded_logprobs(exact, sequences)
    del exact
    with torch.set_grad_enabled(grad):
        padded = padded_logprobs(model, sequences)
        if grad:
            (padded * weights).sum().backward()
            padded_grads = {name: p.grad.float().flatten().clone() for name, p in model.named_parameters()
                            if name.startswith("model.layers.0.self_attn.") and name.endswith("proj.weight")}
            model.zero_grad(set_to_none=True)
        mixed = packed_logprobs(model, sequences, boundaries=False)  # the control, on sdpa
        model.set_attn_implementation(packed_attention.NAME)
        packed = packed_logprobs(model, sequences)
    error = {name: (got - want).abs().mean().item() for name, got in
             (("padded bf16", padded), ("packed bf16", packed), ("control", mixed))}
    print(architecture, "autograd" if grad else "no_grad", "mean |log-prob - fp32| (nats):", error)
    assert error["packed bf16"] <= 1.1 * error["padded bf16"]
    assert error["control"] > 3 * error["padded bf16"]
    if grad:
        (packed * weights).sum().backward()
        for name, want_grad in padded_grads.items():
            got_grad = dict(model.named_parameters())[name].grad.float().flatten()
            assert torch.nn.functional.cosine_similarity(got_grad, want_grad, dim=0) > 0.99, name


def test_the_trainer_gives_the_padded_paths_log_probs_on_the_packed_path(tmp_path):
    command = [sys.executable, "-m", "experiments.trainer_speed", "--out", str(tmp_path), "--layers", "2",
               "--steps", "1", "--settings", "sdpa-blocks", "varlen"]
    if os.environ.get("GPU_SMOKE_TOKENIZER"):
        command += ["--tokenizer", os.environ["GPU_SMOKE_TOKENIZER"]]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    for example in ("frozenlake", "math"):
        new = summary[example]["settings"]["varlen"]
        assert new["attention loaded"] == "rftkit_varlen" and new["padding removal"] is True
        assert new["verl's log-prob fallback"] == "rftkit.trainer.logprobs.token_log_probs"
        assert new["log-prob gap to sdpa-blocks"]["within"] is True
        assert new["reference weights"] == "torch.bfloat16 on cpu"
        assert new["weight sync dtypes"] == "torch.bfloat16" and new["weight sync as object-store views"] is True
