"""What fits which GPU: the trainer's memory estimate (`rftkit.needs.memory`) for each example's default config and the
models a user would train with it, whole or with a LoRA adapter (rank 32 on every linear layer), on one 80 GB
card, one 141 GB card and two 80 GB cards. Each row is the dry run a user would make
(`main.py --dry-run --gpus N --gpu-memory GIB`), on a folder holding only the model's config.json. A second
table sets the estimate beside the peaks the trainer benchmark measured (`torch.cuda.max_memory_allocated`, the
trainer alone on a GPU) and the one a learning run recorded, on the same settings.

    python -m experiments.memory_table > tables.md
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from rftkit.example import REPO
from rftkit import lora
from rftkit.keys import FUSED_BACKEND_KEY, FUSED_KEY, LORA_KEY
from runkit.commands import launch_command
from runkit.examples import EXAMPLES
from runkit.sample_data import make_data, sample_data
from runkit.tiny_model import write_model_config

MODELS = {"frozenlake": ("Qwen2.5-0.5B", "Qwen2.5-3B", "Qwen2.5-7B"), "math": ("Qwen3-0.6B", "Qwen2.5-7B")}
# (the setup, GPUs, each one's memory in GiB as nvidia-smi reports it: an H100 80GB's 81,559 MiB, an H200's 143,771)
SETUPS = (("one 80 GB GPU (H100, A100)", 1, 79.6), ("one 141 GB GPU (H200)", 1, 140.4), ("two 80 GB GPUs", 2, 79.6))
# (example, model, --set settings, the trainer's measured peak in GiB, where it was measured, below docs/): the
# trainer benchmark's pages, and a learning run's own record (verl's actor/perf/max_memory_allocated_gb, its
# largest over the run's steps: Qwen2.5-Coder-0.5B, which has Qwen2.5-0.5B's shape, on one H200)
LORA = lora.overrides(lora.DEFAULT_RANK, None, None)
MEASURED = (
    ("frozenlake", "Qwen2.5-3B", {}, 73.4, "results/2026-12-04-trainer-levers.md"),
    ("frozenlake", "Qwen2.5-3B", {FUSED_KEY: True, FUSED_BACKEND_KEY: "triton"}, 63.4,
     "results/2026-12-04-fused-logprobs.md"),
    ("math", "Qwen3-0.6B", {}, 12.9, "results/2026-12-04-math-micro-batches.md"),
    ("math", "Qwen3-0.6B", {"trainer.max_token_len_per_gpu": 24576}, 12.9, "results/2026-12-04-math-micro-batches.md"),
    ("math", "Qwen3-0.6B", {FUSED_KEY: False, "trainer.max_token_len_per_gpu": 24576}, 34.9,
     "results/2026-12-04-fused-logprobs.md"),
    ("math", "Qwen3-0.6B", {FUSED_KEY: False}, 57.5, "results/2026-12-04-fused-logprobs.md"),
    ("math", "Qwen2.5-0.5B", {FUSED_KEY: False, "trainer.max_token_len_per_gpu": 16384, "model.max_model_len": 8192,
                              "model.max_response_tokens": 1024}, 29.9, "bots/pair2/random"),
    # the launcher's default adapter, fp32 on FSDP1 (rftkit.lora.fp32_adapter), in the trainer benchmark on an H100
    ("frozenlake", "Qwen2.5-3B", LORA, 40.0, "results/2026-12-06-h100-lora-fp32.md"),
    ("math", "Qwen3-0.6B", {**LORA, FUSED_KEY: False, "trainer.max_token_len_per_gpu": 24576}, 28.7,
     "results/2026-12-06-h100-lora-fp32.md"),
)
VERDICT = re.compile(r"^  on the GPU    (fits|may not fit|not checked)", re.M)
PEAK = re.compile(r"peaks at about ([\d.]+) GiB")
FLOOR = re.compile(r"need about ([\d.]+) GiB")


def dry_run(example: str, architecture: str, work: Path, *flags: str, settings: dict | None = None):
    """The dry run of `example`'s default config on a config-only folder of `architecture`."""
    folder = work / "models" / architecture
    if not folder.is_dir():
        write_model_config(folder, architecture)
    command = launch_command(EXAMPLES[example], model=folder, checkpoints=work / "ckpt", settings=settings,
                             data=sample_data(EXAMPLES[example], work)) + ["--dry-run", *flags]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0 and "trainer memory:" not in result.stderr:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return result


def peak(result) -> float:
    """The estimated peak a dry run printed, in GiB."""
    return float(PEAK.search(result.stdout).group(1))


def row(example: str, architecture: str, lora: bool, setup: tuple, work: Path) -> str:
    name, gpus, card = setup
    result = dry_run(example, architecture, work, "--gpus", str(gpus), "--gpu-memory", str(card),
                     *(["--lora"] if lora else []))
    if result.returncode:
        verdict, estimate = "does not fit", f"{FLOOR.search(result.stderr).group(1)} before activations"
    else:
        verdict, estimate = VERDICT.search(result.stdout).group(1), f"{peak(result)} at peak"
    print(f"{example} {architecture} {'LoRA' if lora else 'full'} {name}: {verdict}", file=sys.stderr, flush=True)
    return f"| {example} | {architecture} | {'LoRA' if lora else 'full'} | {name} | {estimate} | {verdict} |"


def measured_row(example: str, architecture: str, settings: dict, measured: float, page: str, work: Path) -> str:
    estimate = peak(dry_run(example, architecture, work, "--gpus", "2", settings=settings))
    changed = ", ".join(f"LoRA rank {value[0]['lora_rank']}" if key == LORA_KEY else f"{key.rsplit('.', 1)[-1]}={value}"
                        for key, value in settings.items()) or "the config's"
    return (f"| {example} | {architecture} | {changed} | {estimate} | {measured} | {estimate / measured:.2f} | "
            f"[{page}]({page}) |")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="memory-table-") as scratch:
        work = Path(scratch)
        make_data(work, tasks=8)
        print("| example | model | trained | GPUs | trainer estimate, GiB a GPU | verdict |")
        print("|---|---|---|---|---|---|")
        for example, architectures in MODELS.items():
            for architecture in architectures:
                for lora in (False, True):
                    for setup in SETUPS:
                        print(row(example, architecture, lora, setup, work), flush=True)
        print("\n| example | model | settings | estimate, GiB | measured peak, GiB | estimate / measured | page |")
        print("|---|---|---|---|---|---|---|")
        for example, architecture, settings, measured, page in MEASURED:
            print(measured_row(example, architecture, settings, measured, page, work), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
