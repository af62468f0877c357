"""Carry a trained model from one GPU machine to the next, in pieces small enough to bring back a few at a time.

    python -m experiments.carry_weights pack HF_FOLDER OUT [--piece-mib 15] [--as-saved | --base BASE]
    python -m experiments.carry_weights unpack PIECES MODEL_FOLDER [--base BASE]

`pack` writes a checkpoint's Hugging Face folder (`global_step_N/actor/huggingface`) with its floating-point
weights in bf16, its config and tokenizer files beside them, as one tar cut into numbered pieces, and
SHA256SUMS. bf16 because that is the precision the rollout engine plays in, at half the size of verl's fp32
save: about 1 GB for a 0.5B model. The fp32 weights also hold updates smaller than bf16's step (Adam moves a
weight by about the learning rate, 1e-6, where bf16's step near 0.01 is 6e-5), which add up over later
updates; `--as-saved` carries them as saved, at twice the size. What is never carried is the optimizer's state
(Adam's moments, twice the fp32 weights): a run that starts from the carried model starts its optimizer afresh.

`--base BASE` (the model the run started from, a GGUF or a folder, present on both machines) carries only what
training changed: each bf16 weight's bits XOR the base's, gzipped. An update smaller than half of bf16's step
leaves a weight's bf16 value as it was, so at small learning rates most of those bits are zero and the pieces
are a fraction of the whole (measured: docs/results/2026-12-06-frozenlake-two-holds.md). `unpack --base BASE`
XORs the base back in and checks each tensor against the sha256 recorded when packing, which also names a
wrong base.

`unpack` checks every piece against SHA256SUMS, naming the first one missing or changed, then joins them and
extracts the folder, which appears whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path

from rftkit.cli import ArgumentParser, at_least
from rftkit.files import check_writable
from rftkit.inputs import InputError, reports_input_errors

SUMS = "SHA256SUMS"
PIECE = "model.tar."  # then a 3-digit number, in order
CHANGES = "changes.json"  # with --base: for each weights file, its tensors and the sha256 of their bf16 bytes


def bf16_folder(source: Path, target: Path) -> None:
    """`source`'s files in `target`, each safetensors file's floating-point tensors cast to bf16 and the config's
    dtype saying so."""
    import torch
    from safetensors.torch import load_file, save_file

    stored = 0  # the bytes of every tensor written
    for path in sorted(source.iterdir()):
        if path.suffix == ".safetensors":
            tensors = {name: t.to(torch.bfloat16) if t.is_floating_point() else t
                       for name, t in load_file(path).items()}
            save_file(tensors, target / path.name, metadata={"format": "pt"})
            stored += sum(t.numel() * t.element_size() for t in tensors.values())
        elif path.is_file():
            shutil.copy2(path, target / path.name)
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    config["dtype"] = "bfloat16"  # transformers 5 reads "dtype"; vLLM serves the config's dtype by default
    config.pop("torch_dtype", None)
    (target / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    index = target / "model.safetensors.index.json"
    if index.is_file():  # its total size names the fp32 bytes otherwise
        data = json.loads(index.read_text(encoding="utf-8"))
        data.setdefault("metadata", {})["total_size"] = stored
        index.write_text(json.dumps(data, indent=2), encoding="utf-8")


@contextmanager
def base_folder(base: Path):
    """BASE as a model folder: the folder itself, or a GGUF converted into a scratch folder for the while."""
    if base.suffix != ".gguf":
        if not any(base.glob("*.safetensors")):
            raise InputError(f"--base {base}: expected a GGUF file or a model folder with *.safetensors")
        yield base
        return
    if not base.is_file():
        raise InputError(f"--base {base}: no such file")
    from runkit.serving import hf_from_gguf

    with tempfile.TemporaryDirectory() as scratch:
        yield hf_from_gguf(base, Path(scratch) / "base")


def base_tensors(base: Path) -> dict:
    """The base folder's tensors by name, each read when its getter is called."""
    from safetensors import safe_open

    getters = {}
    for path in sorted(base.glob("*.safetensors")):
        opened = safe_open(path, "pt")
        getters.update({name: (lambda opened=opened, name=name: opened.get_tensor(name)) for name in opened.keys()})
    return getters


def bits(tensor):
    """A bf16 tensor's bits as int16 (numpy and XOR know no bf16)."""
    import torch

    return tensor.contiguous().view(torch.int16)


def sha256(tensor) -> str:
    return hashlib.sha256(bits(tensor).numpy().tobytes()).hexdigest()


def base_tensor(getters: dict, name: str, like, base: Path):
    """The base's `name`, checked to be a bf16 tensor of `like`'s shape."""
    import torch

    if name not in getters:
        raise InputError(f"--base {base}: has no tensor {name}; expected the model the run started from")
    tensor = getters[name]()
    if tensor.dtype != torch.bfloat16 or tensor.shape != like.shape or like.dtype != torch.bfloat16:
        raise InputError(f"--base {base}: tensor {name} is {tensor.dtype} {tuple(tensor.shape)} against "
                         f"{like.dtype} {tuple(like.shape)}; expected bf16 tensors of one shape")
    return tensor


def take_base_out(folder: Path, base: Path) -> tuple[int, int]:
    """Each weights file of `folder` replaced by its bits XOR the base's (<file>.xor), with CHANGES to check them;
    (weights unlike the base's, weights)."""
    from safetensors.torch import load_file, save_file

    getters, changes, unlike, weights = base_tensors(base), {}, 0, 0
    for path in sorted(folder.glob("*.safetensors")):
        tensors = load_file(path)
        changes[path.name] = {name: sha256(t) for name, t in tensors.items()}
        xored = {name: bits(t) ^ bits(base_tensor(getters, name, t, base)) for name, t in tensors.items()}
        unlike += sum(int(x.count_nonzero()) for x in xored.values())
        weights += sum(x.numel() for x in xored.values())
        save_file(xored, folder / f"{path.name}.xor")
        path.unlink()
    (folder / CHANGES).write_text(json.dumps(changes, indent=1), encoding="utf-8")
    return unlike, weights


def put_base_back(folder: Path, base: Path) -> None:
    """take_base_out undone, each tensor checked against the sha256 it was packed with."""
    import torch
    from safetensors.torch import load_file, save_file

    getters = base_tensors(base)
    for file, digests in json.loads((folder / CHANGES).read_text(encoding="utf-8")).items():
        changed, tensors = load_file(folder / f"{file}.xor"), {}
        for name, packed in digests.items():
            tensors[name] = (changed[name] ^ bits(base_tensor(getters, name, changed[name].view(torch.bfloat16),
                                                              base))).view(torch.bfloat16)
            if sha256(tensors[name]) != packed:
                raise InputError(f"--base {base}: tensor {name} comes back unlike the one packed; BASE is not the "
                                 f"model the run started from")
        save_file(tensors, folder / file, metadata={"format": "pt"})
        (folder / f"{file}.xor").unlink()
    (folder / CHANGES).unlink()


def pack(source: Path, out: Path, piece_bytes: int, as_saved: bool = False, base: Path | None = None) -> list[Path]:
    """The pieces and SHA256SUMS of `source` (as a bf16 folder unless `as_saved`; with `base`, its changes from
    that model), in the new folder `out`."""
    if not (source / "config.json").is_file() or not any(source.glob("*.safetensors")):
        raise InputError(f"HF_FOLDER {source}: expected a Hugging Face model folder (config.json and *.safetensors)")
    if out.exists():
        raise InputError(f"OUT {out}: already there; pieces go into a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    # everything is made in a scratch folder beside `out` and renamed to it at the end: a failure leaves no `out`
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        staged, pieces, tar = Path(scratch) / "model", Path(scratch) / "pieces", Path(scratch) / "model.tar"
        if as_saved:
            shutil.copytree(source, staged)
        else:
            staged.mkdir()
            bf16_folder(source, staged)
        if base is not None:
            with base_folder(base) as folder:
                unlike, weights = take_base_out(staged, folder)
            print(f"{unlike:,} of the {weights:,} bf16 weights ({unlike / weights:.1%}) differ from {base}'s")
        # XORed bits are mostly zeros, which gzip packs well; whole bf16 weights look random to it, and it would
        # cost more time than the pieces it saves
        with tarfile.open(tar, "w:gz", compresslevel=6) if base else tarfile.open(tar, "w") as archive:
            archive.add(staged, arcname="model")
        if tar.stat().st_size > 1000 * piece_bytes:
            raise InputError(f"--piece-mib: more than 1000 pieces of {source}; choose larger pieces")
        pieces.mkdir()
        sums = []
        with open(tar, "rb") as whole:
            for number, chunk in enumerate(iter(lambda: whole.read(piece_bytes), b"")):
                name = f"{PIECE}{number:03d}"
                (pieces / name).write_bytes(chunk)
                sums.append(f"{hashlib.sha256(chunk).hexdigest()}  {name}\n")
        (pieces / SUMS).write_text("".join(sums), encoding="ascii")
        pieces.rename(out)
    return sorted(out.iterdir())


def unpack(pieces: Path, model: Path, base: Path | None = None) -> None:
    """The folder packed into `pieces`, checked piece by piece (with `base` put back in), as `model`."""
    sums_file = pieces / SUMS
    if not sums_file.is_file():
        raise InputError(f"PIECES {pieces}: no {SUMS} (expected the folder `pack` wrote)")
    if model.exists():
        raise InputError(f"MODEL_FOLDER {model}: already there; the model goes into a new folder")
    names = []
    for number, line in enumerate(sums_file.read_text(encoding="ascii").splitlines(), 1):
        digest, _, name = line.partition("  ")
        piece = pieces / name
        if not piece.is_file():
            raise InputError(f"{sums_file}, line {number}: piece {name} is missing from {pieces}")
        if hashlib.sha256(piece.read_bytes()).hexdigest() != digest:
            raise InputError(f"{sums_file}, line {number}: piece {name} differs from the one packed "
                             f"(sha256); bring it again")
        names.append(name)
    model.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model.parent) as scratch:  # renamed to `model` only once whole
        tar = Path(scratch) / "model.tar"
        with open(tar, "wb") as whole:
            for name in names:
                whole.write((pieces / name).read_bytes())
        with tarfile.open(tar) as archive:
            archive.extractall(scratch, filter="data")
        extracted = Path(scratch) / "model"
        if (extracted / CHANGES).is_file() and base is None:
            raise InputError(f"PIECES {pieces}: packed as changes from a base model; give --base, the model the run "
                             f"started from")
        if base is not None:
            if not (extracted / CHANGES).is_file():
                raise InputError(f"--base {base}: PIECES {pieces} hold the whole weights; unpack them without --base")
            with base_folder(base) as folder:
                put_base_back(extracted, folder)
        extracted.rename(model)


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.carry_weights", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, help="pack on the machine that trained, "
                                     "unpack on the next")
    packing = commands.add_parser("pack", help="a model folder as bf16 pieces")
    packing.add_argument("source", metavar="HF_FOLDER", type=Path,
                         help="a checkpoint's Hugging Face folder, global_step_N/actor/huggingface")
    packing.add_argument("out", metavar="OUT", type=Path, help="a new folder for the pieces and SHA256SUMS")
    packing.add_argument("--piece-mib", type=at_least(1), default=15, help="MiB a piece (default: %(default)s)")
    packing.add_argument("--as-saved", action="store_true", help="the weights as saved (fp32 from verl), not bf16")
    packing.add_argument("--base", type=Path, help="the model the run started from (GGUF or folder), also on the "
                         "next machine: carry only the bf16 weights' changes from it")
    unpacking = commands.add_parser("unpack", help="the pieces, checked, as a model folder")
    unpacking.add_argument("pieces", metavar="PIECES", type=Path, help="the folder `pack` wrote")
    unpacking.add_argument("model", metavar="MODEL_FOLDER", type=Path, help="a new folder for the model")
    unpacking.add_argument("--base", type=Path, help="the model given to pack's --base (GGUF or folder)")
    args = parser.parse_args(argv)
    if args.command == "pack":
        if args.as_saved and args.base:
            parser.error("--as-saved and --base: the changes from a base are carried in bf16 only; choose one")
        check_writable(args.out.parent, "OUT")
        made = pack(args.source, args.out, args.piece_mib * 2 ** 20, args.as_saved, args.base)
        print(f"{len(made) - 1} pieces and {SUMS} in {args.out} ({sum(p.stat().st_size for p in made) / 2 ** 20:.0f} "
              f"MiB)")
    else:
        check_writable(args.model.parent, "MODEL_FOLDER")
        unpack(args.pieces, args.model, args.base)
        print(f"{args.model}: {', '.join(sorted(p.name for p in args.model.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
