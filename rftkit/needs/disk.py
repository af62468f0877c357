"""What a run's checkpoints take on disk, said before the launch beside the space the disk has.

Trinity-RFT 0.6.0 has verl 0.8's FSDP checkpoint manager save the actor's model shard, its optimizer and its extra
(scheduler, random) states, and a Hugging Face copy of the model where `trainer.save_hf_checkpoint` asks for one
(`always`: every save; `last`: the last). A weight takes the actor's dtype (fp32 unless the config sets
`model_dtype`) in the shard, twice that in the optimizer (AdamW's two moments) and the same again in the HF copy,
which is the full state dict verl gathers, saved as it is. With an adapter, rftkit.trainer.lora_saves makes the
shard hold the adapter alone and the checkpoint adds the adapter as PEFT saves it, and rftkit.lora refuses an HF
copy. Every save also writes the model's config and tokenizer files.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rftkit.needs import memory

GB, MB = 1e9, 1e6
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")  # what a model folder holds besides its files


@dataclass
class Sizes:
    """Bytes of one checkpoint, by part; `hf_copy` is in the saves that have one (`hf_saves`: every, last, none)."""
    shard: float
    optimizer: float
    adapter: float
    files: float
    hf_copy: float
    hf_saves: str

    @property
    def each(self) -> float:
        """A checkpoint with the HF copy where every save has one, else without it."""
        return self.shard + self.optimizer + self.adapter + self.files + (self.hf_copy if self.hf_saves == "every"
                                                                          else 0.0)


def sizes(config, trainable: int | None = None) -> Sizes | None:
    """One checkpoint of a validated Trinity config, or None where the model's size is not known here
    (`memory.model_parameters`). `trainable` is a LoRA adapter's parameter count (None: the whole model)."""
    params = memory.model_parameters(config)
    if params is None:
        return None
    folder = Path(config.model.model_path)
    weight = memory.actor_weight_bytes(config)
    trained = params if trainable is None else trainable
    files = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.name.endswith(WEIGHT_SUFFIXES))
    hf_saves = {"always": "every", "last": "last"}.get(config.trainer.save_hf_checkpoint, "none")
    return Sizes(shard=weight * trained, optimizer=2 * weight * trained,
                 adapter=0.0 if trainable is None else weight * trainable, files=files,
                 hf_copy=0.0 if trainable is not None else weight * params,
                 hf_saves="none" if trainable is not None else hf_saves)


def free_bytes(path: str | Path) -> float | None:
    """Free space on the disk that `path` is (or will be made) on."""
    path = Path(path).absolute()
    for folder in (path, *path.parents):
        if folder.exists():
            return float(shutil.disk_usage(folder).free)
    return None


def size(count: float) -> str:
    return f"{count / GB:.1f} GB" if count >= GB else f"{count / MB:.0f} MB"


def describe(config, trainable: int | None = None) -> str | None:
    """One line: a checkpoint's size by part, how many the run keeps, and the disk's free space; None: no estimate."""
    found = sizes(config, trainable)
    if found is None:
        return None
    parts = [f"model shard {size(found.shard)}", f"optimizer {size(found.optimizer)}"]
    if found.adapter:
        parts.append(f"adapter {size(found.adapter)}")
    if found.hf_saves == "every":
        parts.append(f"HF copy {size(found.hf_copy)}")
    line = f"about {size(found.each)} a checkpoint ({', '.join(parts)})"
    last = found.hf_copy if found.hf_saves == "last" else 0.0
    if last:
        line += f", the last one {size(last)} more (its HF copy)"
    keep = config.trainer.max_checkpoints_to_keep
    total = config.trainer.total_steps or config.buffer.total_steps
    saves = -(-total // config.trainer.save_interval) if total else None  # the last step's save included
    kept = keep if keep and (saves is None or keep < saves) else saves
    if kept is None:
        return line + "; every one kept (trainer.max_checkpoints_to_keep: 0)"
    needed = kept * found.each + last
    line += f"; {kept} kept: about {size(needed)}"
    free = free_bytes(config.checkpoint_job_dir)
    if free is not None:
        line += f", {size(free)} free there"
        if needed > free:
            line += " (not enough: lower trainer.max_checkpoints_to_keep, or free some)"
    return line
