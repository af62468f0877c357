"""The keys and values of a run's config, checked against Trinity-RFT's config classes before Trinity reads them.

`check_set_key` refuses a `--set` key that Trinity's config has no place for; `check_sections` a value where
Trinity has a section or a list; `check_counts` a count below its least sensible value; `check_groups` groups of
one rollout that the advantage function drops; `check_tune_sets` a setting agentscope's tune() replaces or never
hands on. Each names the key and where it came from (the file, or `--set`); `check_values` runs all but the first.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from types import UnionType

from rftkit import keys
from rftkit.inputs import InputError, taskset_entries


def _config_class(hint):
    """X for a field typed `Optional[X]` or `X | None`; any other type as it is."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) in (typing.Union, UnionType) and len(args) == 1:
        return args[0]
    return hint


def check_set_key(dotted: str, where: str | None = None) -> None:
    """Refuse a `--set` key that Trinity-RFT's config has no place for, naming the nearest keys it has there
    (the message starts with `where`, by default "--set <key>").

    The key is followed through Trinity's config classes field by field (a number picks an item of a
    list of them). Below a field of another type (a mapping such as trainer.trainer_config, a number)
    any key is left to whoever reads that value.
    """
    from trinity.common.config import Config

    node, path = Config, []
    for part in dotted.split("."):
        node = _config_class(node)
        if typing.get_origin(node) is list and part.isdigit():
            (node,) = typing.get_args(node)
        elif dataclasses.is_dataclass(node):
            names = [field.name for field in dataclasses.fields(node)]
            if part not in names:
                nearest = [".".join([*path, name]) for name in difflib.get_close_matches(part, names)]
                missing = ".".join([*path, part])
                raise InputError(f"{where or f'--set {dotted}'}: Trinity-RFT's config has no key {missing}"
                                 + (f" (nearest: {', '.join(nearest)})" if nearest else ""))
            node = typing.get_type_hints(node)[part]
        else:
            return
        path.append(part)


def key_in(source: str, dotted: str) -> str:
    """How a message names a key of a config file ("--config F: a.b") or of --set ("--set a.b")."""
    return f"{source} {dotted}" if source == "--set" else f"{source}: {dotted}"


def check_sections(config: dict, source: str) -> None:
    """Refuse a value where Trinity-RFT's config has a section (a mapping of settings), a list of sections or a
    list, but which is none of these, naming its key and `source` (a file, or "--set"): the launcher reads those
    before Trinity does.

    A field that may be None (`Optional[...]`) may be null; keys Trinity has no field for are left to its loader.
    """
    from trinity.common.config import Config

    def walk(value, hint, path: list[str]) -> None:
        node, optional = _config_class(hint), _config_class(hint) is not hint
        if value is None and optional:
            return
        where = key_in(source, ".".join(path))
        if typing.get_origin(node) is list:
            if not isinstance(value, list):
                raise InputError(f"{where}: expected a list, got {value!r}")
            (item,) = typing.get_args(node) or (None,)
            if dataclasses.is_dataclass(_config_class(item)):
                for index, entry in enumerate(value):
                    walk(entry, item, [*path, str(index)])
        elif dataclasses.is_dataclass(node):
            if not isinstance(value, dict):
                raise InputError(f"{where}: expected a mapping of settings, got {value!r}")
            fields = typing.get_type_hints(node)
            for key, entry in value.items():
                if key in fields:
                    walk(entry, fields[key], [*path, str(key)])

    fields = typing.get_type_hints(Config)
    for key, value in config.items():
        if key in fields:
            walk(value, fields[key], [str(key)])


# Counts Trinity-RFT 0.6.0's checker lets through below their least sensible value (0 where Trinity reads it as
# "work it out"): a batch of -4 maps would pass a dry run and fail on the GPU, an eval_interval of 0 divides by
# zero at the first explore step, and a negative learning rate or gradient clip (torch scales the gradient by
# clip / norm) trains away from the reward. The algorithm's arguments likewise: a negative PPO clip range inverts
# the clipped ratio, a negative advantage epsilon can zero or flip a group's spread, and a negative KL
# coefficient rewards leaving the reference model.
LEAST = {"buffer.batch_size": 1, "buffer.train_batch_size": 0, "buffer.total_epochs": 1, "buffer.total_steps": 1,
         "algorithm.repeat_times": 1, "explorer.runner_per_model": 1, "model.max_model_len": 1,
         "model.max_response_tokens": 1, "trainer.max_token_len_per_gpu": 1, "trainer.total_steps": 1,
         "trainer.save_interval": 0, "synchronizer.sync_interval": 1, "model.temperature": 0,
         "explorer.over_rollout.ratio": 0, "explorer.eval_interval": 1, "explorer.max_timeout": 1,
         "algorithm.optimizer.lr": 0, "trainer.grad_clip": 0, "explorer.rollout_model.engine_num": 1,
         "algorithm.policy_loss_fn_args.clip_range": 0, "algorithm.policy_loss_fn_args.clip_range_low": 0,
         "algorithm.policy_loss_fn_args.clip_range_high": 0, "algorithm.advantage_fn_args.epsilon": 0,
         "algorithm.kl_loss_fn_args.kl_coef": 0, "algorithm.kl_penalty_fn_args.kl_coef": 0}


def check_counts(config: dict, source: str) -> None:
    """Refuse a setting of LEAST (counts, the sampling temperature, the learning rate, the gradient clip, the
    algorithm's clip ranges and coefficients) below its least value, naming its key and `source` (a file, or
    "--set")."""
    for dotted, least in LEAST.items():
        value = keys.get(config, dotted)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < least:
            raise InputError(f"{key_in(source, dotted)}: expected {least} or more, got {value}")


def check_groups(config: dict, source: str) -> None:
    """Refuse groups of one rollout where the advantage function drops them: Trinity-RFT 0.6.0's grpo and
    multi_step_grpo skip a group of one whenever `std_threshold` is set, so no experience would reach the trainer.
    Trinity's default group is 1."""
    group = keys.get(config, "algorithm.repeat_times", 1)
    threshold = keys.get(config, "algorithm.advantage_fn_args.std_threshold")
    if group == 1 and threshold is not None:
        raise InputError(f"{key_in(source, 'algorithm.repeat_times')}: 1 rollout a task, and "
                         f"algorithm.advantage_fn_args.std_threshold is set ({threshold}): every group of one is "
                         f"skipped, so the trainer would never get an experience; expected 2 or more")


# Where agentscope.tuner.tune() puts its own values over the config's (agentscope 1.0.21, tuner/_config.py): the
# workflow type, its adapter's; and each taskset's workflow_args, which carry the workflow and judge functions to
# that adapter, which hands the workflow function a task's row and the model and nothing of workflow_args.
TUNE_SETS = ("buffer.explorer_input.default_workflow_type", "buffer.explorer_input.taskset.default_workflow_type")


def check_tune_sets(config: dict, source: str) -> None:
    """Refuse a setting that tune() replaces or never hands on, naming its key and `source` (a file, or "--set"):
    Trinity would take it, and the run would go as if it were not there."""
    for dotted in TUNE_SETS:
        if keys.get(config, dotted) is not None:
            raise InputError(f"{key_in(source, dotted)}: tune() sets the workflow type itself (to its adapter, which "
                             f"runs the example's workflow function), so a value here is never used")
    for taskset, key in taskset_entries(config):
        given = taskset.get("workflow_args") if isinstance(taskset, dict) else None
        if given:
            raise InputError(f"{key_in(source, f'{key}.workflow_args')}: tune() hands the workflow function a task's "
                             f"row and the model, not these ({', '.join(map(str, given))}), so they are never used; "
                             f"an episode's settings go in the task rows")


def check_values(config: dict, source: str) -> None:
    """Every check above of a config's values, naming `source` (the file, or "--set") in the first refusal."""
    for check in (check_sections, check_counts, check_groups, check_tune_sets):
        check(config, source)
