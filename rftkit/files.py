"""Writing output files so that a crash never leaves a half-written one behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from rftkit.inputs import InputError


@contextlib.contextmanager
def atomic_paths(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Yield temporary paths beside `paths`; rename them all into place only if the block succeeds.

    Each temporary file sits in its target's folder, so the final rename is
    atomic. On an exception the temporaries are removed and no target changes.
    """
    targets = [Path(p) for p in paths]
    check_file_targets(*targets)  # a rename onto a folder would fail after the first files were in place
    temps = []
    try:
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would make the result private to this user
            temps.append(Path(tmp))
        yield temps
        for tmp, target in zip(temps, targets):
            os.replace(tmp, target)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def check_file_targets(*paths: str | os.PathLike) -> None:
    """Refuse to write files at `paths` where a folder has one's name: called before the work that makes them."""
    for path in map(Path, paths):
        if path.is_dir():
            raise InputError(f"{path}: a folder is in the way; expected to write a file there")


@contextlib.contextmanager
def atomic_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Yield `folder`.partial, made empty, to write a folder's files in; rename it to `folder` only if the block
    succeeds, so that only a complete folder ever has the final name (a leftover .partial is cleared next time)."""
    import shutil

    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial
    partial.rename(folder)


def check_writable(folder: str | os.PathLike, flag: str) -> None:
    """Refuse `folder` (given by `flag`) unless it is, or can be made, a folder this process may write in.

    Checked before any work, by writing a file in the nearest folder that exists and removing it (permission
    bits do not tell: root passes them for /sys or a read-only mount), so that a bad output path costs nothing
    and leaves nothing behind.
    """
    folder = Path(folder).absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(f"{flag} {folder}: cannot write there, {existing} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".rftkit-write-check-", dir=existing)
    except OSError as exc:
        raise InputError(f"{flag} {folder}: cannot write there, {existing} is not writable ({exc.strerror})") \
            from None
    os.close(fd)
    os.unlink(probe)


def packed_or_plain(path: str | os.PathLike) -> Path:
    """`path`, or `path`.gz where only the compressed copy exists (as gzip_in_place leaves a kept record)."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    return packed if packed.is_file() and not path.is_file() else path


def gzip_in_place(path: str | os.PathLike) -> Path:
    """`path` replaced by `path`.gz, with no time stamp inside (the same content packs to the same bytes): how the
    records kept under docs/ hold long files, since they travel with every GPU call."""
    import gzip
    import shutil

    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    with open(path, "rb") as plain, gzip.GzipFile(packed, "wb", mtime=0) as out:
        shutil.copyfileobj(plain, out)
    path.unlink()
    return packed

