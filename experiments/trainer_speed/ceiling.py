"""The trainer benchmark's ceilings: the bare model's forward and backward over the same sequences, as
transformers runs it (with activation checkpointing, as the trainer does), and with the trainer's levers
where they fit: liger-kernel's RMSNorm, SwiGLU and RoPE (as verl's `use_liger` applies them, without the
fused cross-entropy), and no activation checkpointing."""

from __future__ import annotations

from pathlib import Path

from experiments.trainer_speed.settings import PEAK_FLOPS, lengths
from experiments.trainer_speed.worker import synced

def run_ceiling(example: str, model: Path, budget: int, steps: int) -> dict:
    """The bare model's forward and backward over the benchmark's sequences: packed and padded."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig, AutoModelForCausalLM

    from rftkit.trainer import packed_attention

    packed_attention.register()
    sequences = [p + r for p, r in lengths(example)]
    vocab = AutoConfig.from_pretrained(model).vocab_size
    generator = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, vocab, (n,), generator=generator).cuda() for n in sequences]
    batches, current = [], []
    for seq in ids:  # in order, each micro-batch filled up to the budget, as verl's dynamic batching does
        if current and sum(len(s) for s in current) + len(seq) > budget:
            batches.append(current)
            current = []
        current.append(seq)
    batches.append(current)

    def packed_pass(model_, backward=True):
        for batch in batches:
            tokens = torch.cat(batch)
            positions = torch.cat([torch.arange(len(s), device="cuda") for s in batch])
            cu = torch.tensor([0, *torch.tensor([len(s) for s in batch]).cumsum(0).tolist()], device="cuda",
                              dtype=torch.int32)
            longest = max(len(s) for s in batch)
            logits = model_(input_ids=tokens[None], position_ids=positions[None], cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                            max_length_q=longest, max_length_k=longest, use_cache=False).logits[0]
            loss = F.cross_entropy(logits[:-1].float(), tokens[1:])
            if backward:
                loss.backward()

    def padded_pass(model_, backward=True):
        for batch in batches:
            tokens = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(s) for s in batch], batch_first=True)
            logits = model_(input_ids=tokens, attention_mask=mask, use_cache=False).logits
            labels = tokens[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels.flatten())
            if backward:
                loss.backward()

    def measure(attn: str, run, liger: bool = False, checkpointing: bool = True) -> dict:
        model_ = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16, attn_implementation=attn).cuda()
        if liger:
            from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

            _apply_liger_kernel_to_instance(model=model_, fused_linear_cross_entropy=False, swiglu=True)
        if checkpointing:
            model_.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model_.train()
        params = sum(p.numel() for p in model_.parameters())
        torch.cuda.reset_peak_memory_stats()
        run(model_)  # warm-up
        model_.zero_grad(set_to_none=True)
        seconds = min(synced(lambda: run(model_))[1] for _ in range(steps))
        peak = torch.cuda.max_memory_allocated() / 2 ** 30
        with torch.no_grad():  # the reference pass's work: forward only
            forward = min(synced(lambda: run(model_, backward=False))[1] for _ in range(steps))
        model_ = None  # the next model gets the memory
        torch.cuda.empty_cache()
        total = sum(sequences)
        return {"seconds": seconds, "tokens/s": total / seconds, "parameters": params,
                "MFU": 6 * params * total / seconds / PEAK_FLOPS, "peak allocated (GiB)": peak,
                "forward only (s)": forward, "forward only tokens/s": total / forward}

    # The packed pass must fit: where it does not, the caller runs all again at a smaller budget. The padded pass
    # pads every sequence to the micro-batch's longest, so at the same budget it may need more than the card has
    # (math's on an 80 GB card); it is a comparison, and then reads "out of memory".
    result = {"micro-batches": len(batches), "micro-batch token budget": budget,
              "packed (varlen)": measure(packed_attention.NAME, packed_pass),
              "padded (sdpa)": if_it_fits(measure, "sdpa", padded_pass)}
    result["ceiling"] = fastest(result, ("packed (varlen)", "padded (sdpa)"))

    try:
        import liger_kernel  # noqa: F401  (only to know whether the liger levers can run here)
        levers = {"packed, liger": (True, True), "packed, no checkpointing": (False, False),
                  "packed, liger, no checkpointing": (True, False)}
    except ImportError:
        levers = {"packed, no checkpointing": (False, False)}
    for name, (liger, checkpointing) in levers.items():
        result[name] = if_it_fits(measure, packed_attention.NAME, packed_pass, liger=liger,
                                  checkpointing=checkpointing)
    if any("error" not in result[name] for name in levers):
        result["ceiling with levers"] = fastest(result, levers)
    return result


def if_it_fits(measure, *args, **kwargs) -> dict:
    """`measure(*args, **kwargs)`, or {"error": "out of memory"} where the GPU could not hold it."""
    import torch

    try:
        reading = measure(*args, **kwargs)
    except torch.cuda.OutOfMemoryError:
        reading = {"error": "out of memory"}
    torch.cuda.empty_cache()  # here, not in `except`: the exception's frames hold the model until it ends
    return reading


def fastest(result: dict, names) -> dict:
    """The reading among `names` with the most tokens/s, leaving out those that failed, named in "from"."""
    best = max((name for name in names if "error" not in result[name]), key=lambda name: result[name]["tokens/s"])
    return {"from": best, **result[best]}


