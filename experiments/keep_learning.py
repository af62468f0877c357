"""What the FrozenLake reports read from a learning run, small enough to commit:

    python -m experiments.keep_learning SRC DEST [--before KEPT]

SRC is an `experiments.frozenlake_learning` output folder as a GPU hold brought it back. DEST gets its
evaluations (before/ and after/, each episodes.jsonl gzipped), its comparison and curves (before_after.*,
curves.*), and in DEST/run the run's own records: the tensorboard files, the GPU samples, the trainer's log,
the start-up timeline and the launch's config (as config.yaml). Left out: checkpoints, the experience buffer
and the other logs. `experiments.frozenlake_runs`, `frozenlake_learning --report-only` and
`scripts/step_timeline.py DEST/run` read what is kept. With --before, DEST/before is a link to KEPT, an
evaluation already kept (docs/learning/base/before, or the hold before's after/), once SRC's before/ is found to
be the same files: the kept runs travel with every GPU call, so the same evaluation is stored once.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import sys
from pathlib import Path

from rftkit.cli import ArgumentParser
from rftkit.files import atomic_folder, gzip_in_place
from rftkit.inputs import InputError, reports_input_errors
from runkit.runs import job_dir, launch_config_path

REPORTS = ("before_after.md", "before_after.png", "curves.md", "curves.png")
RECORDS = ("monitor", "gpu_samples.csv", "startup.jsonl", "log/trainer.log")


def keep(source: Path, dest: Path, before: Path | None = None) -> None:
    run = job_dir(source / "checkpoints")
    if run is None or not (source / "after" / "report.json").is_file():
        raise InputError(f"{source}: expected an experiments.frozenlake_learning output folder, with "
                         f"after/report.json and checkpoints/<project>/<name>/log")
    if dest.exists():
        raise InputError(f"{dest}: exists; keep writes a new folder")
    with atomic_folder(dest) as partial:
        for part in ("before", "after"):
            if (source / part).is_dir():
                shutil.copytree(source / part, partial / part)
                if (partial / part / "episodes.jsonl").is_file():
                    gzip_in_place(partial / part / "episodes.jsonl")
        for name in REPORTS:
            if (source / name).is_file():
                shutil.copy(source / name, partial / name)
        for name in RECORDS:
            found = run / name
            if found.is_dir():
                shutil.copytree(found, partial / "run" / name)
            elif found.is_file():
                (partial / "run" / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(found, partial / "run" / name)
        launch_config = launch_config_path(run)
        if launch_config.is_file():
            shutil.copy(launch_config, partial / "run" / "config.yaml")
        if before is not None:
            link_same(partial / "before", before, dest)


def link_same(copy: Path, kept: Path, dest: Path) -> None:
    """`copy`, the kept run DEST's before/, replaced by a link to `kept` relative to DEST; `kept` must hold the same
    files with the same bytes."""
    names = sorted(path.name for path in copy.iterdir()) if copy.is_dir() else []
    if not kept.is_dir() or sorted(path.name for path in kept.iterdir()) != names or \
            filecmp.cmpfiles(copy, kept, names, shallow=False)[0] != names:
        raise InputError(f"--before {kept}: expected the same files as the run's before/ ({', '.join(names)})")
    shutil.rmtree(copy)
    copy.symlink_to(os.path.relpath(kept.resolve(), dest.resolve()))


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.keep_learning", description=__doc__)
    parser.add_argument("source", metavar="SRC", type=Path, help="an experiments.frozenlake_learning output folder")
    parser.add_argument("dest", metavar="DEST", type=Path, help="a new folder for what is kept")
    parser.add_argument("--before", metavar="KEPT", type=Path,
                        help="an evaluation already kept, the same as SRC's before/: linked instead of copied")
    args = parser.parse_args(argv)
    keep(args.source, args.dest, args.before)
    print(f"kept {args.source} in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
