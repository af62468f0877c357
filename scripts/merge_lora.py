"""Merge a LoRA adapter into its base model: a Hugging Face model folder that vLLM or transformers loads alone.

    python scripts/merge_lora.py BASE ADAPTER --out DIR

BASE is the model the adapter was trained on (an HF model folder); ADAPTER a folder as PEFT saves one, such as
the `lora_adapter` of a LoRA run's checkpoint (`global_step_N/actor/lora_adapter`). DIR gets the merged weights
in the base's dtype, with the base's tokenizer; it appears only once complete.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rftkit.cli import ArgumentParser
from rftkit.files import atomic_folder, check_writable
from rftkit.inputs import InputError, reports_input_errors
from rftkit.inputs.model_path import check_model
from rftkit.lora import check_adapter

def merge(base: Path, adapter: Path, out: Path) -> Path:
    """Write base + adapter, merged, to `out` (through `<out>.partial`); an InputError where the base's weights
    cannot be loaded or the adapter does not fit them."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
    except Exception as exc:  # noqa: BLE001 - OSError for no weights, safetensors' own error for broken ones
        said = (str(exc).splitlines() or [""])[0]
        raise InputError(f"BASE {base}: cannot load its weights ({type(exc).__name__}: {said}); expected the "
                         f"model the adapter was trained on, as transformers saves one") from None
    try:
        merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    except (ValueError, RuntimeError, KeyError) as exc:  # shapes or layer names that are not the base's
        raise InputError(f"ADAPTER {adapter}: does not fit BASE {base}: {str(exc).splitlines()[0]}") from None
    with atomic_folder(out) as partial:
        with torch.no_grad():
            merged.save_pretrained(partial)
        if any(base.glob("tokenizer*")):
            AutoTokenizer.from_pretrained(base).save_pretrained(partial)
    return out


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("base", type=Path, help="the base model, an HF model folder")
    parser.add_argument("adapter", type=Path, help="the LoRA adapter, a folder as PEFT saves one")
    parser.add_argument("--out", type=Path, required=True, help="the merged model's folder (must not exist)")
    args = parser.parse_args(argv)
    check_model(args.base, "BASE")
    check_adapter(args.adapter, "ADAPTER")
    if args.out.exists():
        raise InputError(f"--out {args.out}: already exists; give a new folder")
    check_writable(args.out, "--out")
    print(f"merged model: {merge(args.base, args.adapter, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
