"""A run's folders as Trinity leaves them below the launcher's --checkpoint-dir: the run itself
(<checkpoints>/<project>/<name>) and its last saved weights."""

from __future__ import annotations

from pathlib import Path

from rftkit import keys
from rftkit.checkpoints import TRACKER, complete_steps, tracker_step
from rftkit.inputs import InputError
from rftkit.trainer.lora_saves import ADAPTER_FOLDER


def job_dir(checkpoints: Path) -> Path | None:
    """The run's folder, <checkpoints>/<project>/<name>: the one that holds Trinity's logs."""
    found = sorted(checkpoints.glob("*/*/log"))
    return found[0].parent if found else None


def launch_config_path(run: Path) -> Path:
    """Where the launcher (rftkit.launch) writes the config of the run <checkpoints>/<project>/<name>: beside its
    project folder, as <checkpoints>/<project>-<name>.yaml."""
    return run.parent.parent / f"{run.parent.name}-{run.name}.yaml"


def launch_config(run: Path) -> dict | None:
    """The config a run was launched with (`launch_config_path`), or a kept run's copy, `config.yaml` in its
    folder; None where neither is there."""
    from rftkit.overrides import load_yaml

    path = kept_config_path(run)
    return load_yaml(path, "the run's launch config") if path else None


def kept_config_path(run: Path) -> Path | None:
    """Which of `launch_config`'s two places holds the run's config, if either."""
    return next((path for path in (launch_config_path(run), run / "config.yaml") if path.is_file()), None)


def group_size(run: Path) -> int | None:
    """Rollouts per task (`algorithm.repeat_times`) of the config the run was launched with, where kept and set."""
    config = launch_config(run)
    group = keys.get(config, "algorithm.repeat_times") if config else None
    if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
        raise InputError(f"the run's launch config {kept_config_path(run)}: algorithm.repeat_times is {group!r}; "
                         f"expected a whole number of rollouts a task, 1 or more")
    return group


def last_checkpoint(checkpoints: Path, adapter: bool = False) -> Path:
    """The HF weights (with `adapter`: the LoRA adapter) of the run's newest complete save
    (rftkit.checkpoints.missing_part): at or before the step latest_checkpointed_iteration.txt names, which
    moves once a save has finished; without that file, any step. A run stopped in the middle of re-saving the
    named step, with its HF weights, leaves that step torn."""
    part = ADAPTER_FOLDER if adapter else "huggingface"
    for job in sorted({tracker.parent for tracker in checkpoints.glob(f"*/*/{TRACKER}")}
                      | {step.parent for step in checkpoints.glob("*/*/global_step_*")}):
        for step in complete_steps(job, up_to=tracker_step(job)):
            weights = job / f"global_step_{step}" / "actor" / part
            if weights.is_dir():
                return weights
    raise SystemExit(f"error: no complete global_step_*/actor/{part} below {checkpoints}")
