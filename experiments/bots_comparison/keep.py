"""What the comparison's report reads from a run, small enough to commit: `python -m experiments.bots_comparison.keep
SRC DEST` copies <SRC>/<selector>/ (one run folder, as `runs.py` wrote it on the GPU machine) to DEST.

A run folder holds about 80 MB besides its weights: the experience queue with every reply, Trinity's SQLite copy
of it, and a launch log that is mostly HTTP access lines. `--report-only` on DEST's parent gives the same figures
as on SRC's; the replies of the held-out evaluation (after/episodes.jsonl) and the launch's config (beside the
project folder) are kept whole. The evaluation's replies and the slimmed queue are gzipped.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from rftkit.files import atomic_folder, gzip_in_place
from runkit.runs import job_dir, launch_config_path

QUEUE = Path("buffer") / "experience_buffer.jsonl"
# The experience fields that report.groups and the page's reply-length figures read.
QUEUE_FIELDS = ("eid", "info", "reward", "metrics", "prompt_length", "response_length")
# Left out of the job folder: the queue (written slimmed instead), the checkpoints, the 16 workflow runners' logs.
LEFT_OUT = ("buffer", "global_step_*", "explorer_runner_*.log")
ACCESS_LINE = '"POST /v1/chat/completions HTTP/1.1"'  # vLLM's access log, one line a request


def slim_experience(line: str) -> str:
    experience = json.loads(line)
    kept = {key: experience[key] for key in QUEUE_FIELDS if key in experience}
    kept["eid"] = {key: kept["eid"][key] for key in ("batch", "task", "run")}
    kept["info"] = {"task_index": kept["info"]["task_index"]}
    return json.dumps(kept)


def keep(source: Path, dest: Path) -> None:
    job = job_dir(source / "checkpoints")
    if job is None:
        raise SystemExit(f"error: {source}: no checkpoints/<project>/<name>/log folder; a run folder of runs.py?")
    if dest.exists():
        raise SystemExit(f"error: {dest}: exists; keep writes a new folder")
    with atomic_folder(dest) as partial:
        shutil.copytree(source / "after", partial / "after")
        if (partial / "after" / "episodes.jsonl").is_file():
            gzip_in_place(partial / "after" / "episodes.jsonl")
        job_copy = partial / job.relative_to(source)
        shutil.copytree(job, job_copy, ignore=shutil.ignore_patterns(*LEFT_OUT))
        launch_config = launch_config_path(job)
        if launch_config.is_file():  # what the run was launched with, for reports that read its settings
            shutil.copy(launch_config, job_copy.parent.parent / launch_config.name)
        (job_copy / QUEUE).parent.mkdir()
        with open(job / QUEUE) as lines, open(job_copy / QUEUE, "w") as out:
            out.writelines(slim_experience(line) + "\n" for line in lines if line.strip())
        gzip_in_place(job_copy / QUEUE)
        for log in ("train.log", "eval_after.log"):
            if (source / log).is_file():
                text = (source / log).read_text(errors="replace").splitlines(keepends=True)
                (partial / log).write_text("".join(line for line in text if ACCESS_LINE not in line))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    keep(Path(args[0]), Path(args[1]))
    print(f"kept {args[0]} in {args[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
