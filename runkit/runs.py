"""A run's folders as Trinity leaves them below the launcher's --checkpoint-dir: the run itself
(<checkpoints>/<project>/<name>) and its last saved weights."""

from __future__ import annotations

from pathlib import Path

from rftkit.run_state import TRACKER, tracker_step  # the one reader of verl's checkpoint pointer


def job_dir(checkpoints: Path) -> Path | None:
    """The run's folder, <checkpoints>/<project>/<name>: the one that holds Trinity's logs."""
    found = sorted(checkpoints.glob("*/*/log"))
    return found[0].parent if found else None


def last_checkpoint(checkpoints: Path) -> Path:
    """The HF weights of the run's last completed save.

    Trinity writes latest_checkpointed_iteration.txt only after a save has finished, so a run
    interrupted mid-save still names a complete one; without that file, the highest step."""
    for tracker in checkpoints.glob(f"*/*/{TRACKER}"):
        weights = tracker.parent / f"global_step_{tracker_step(tracker.parent)}" / "actor" / "huggingface"
        if weights.is_dir():
            return weights
    found = sorted(checkpoints.glob("*/*/global_step_*/actor/huggingface"),
                   key=lambda p: int(p.parent.parent.name.removeprefix("global_step_")))
    if not found:
        raise SystemExit(f"error: no global_step_*/actor/huggingface below {checkpoints}")
    return found[-1]
