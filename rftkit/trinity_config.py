"""Trinity's side of a launch: its plugins, and its validation of the config.

`validate` builds the config exactly as tune() will (agentscope's conversion, then Trinity's
`check_and_update`) without leaving anything behind. What that config will run is `rftkit.summary`'s; the
patches that keep the checks light are `rftkit.check_patches`'.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any, Callable

from omegaconf.errors import OmegaConfBaseException

from rftkit import trinity_plugins
from rftkit.inputs import InputError, registry_names
from rftkit.overrides import write_yaml
from rftkit.patches.apply import install

PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"  # trinity.common.constants.PLUGIN_DIRS_ENV_VAR


_loaded_plugin_dirs: set[str] = set()


def use_plugins() -> None:
    """Make the Trinity plugins known here, where the config is validated: this project's, imported by
    name (`rftkit.trinity_plugins`, which Ray workers get through the worker hook), and those in the
    folders a user put in TRINITY_PLUGIN_DIRS, with Trinity's loader (as its actors will). Removes
    the copies of this project's plugins that earlier versions let Trinity leave in its package."""
    from trinity.utils import plugin_loader

    for path in trinity_plugins.remove_stale_copies(plugin_loader):
        print(f"removed {path}: a copy of this project's plugin that Trinity's actors would load", flush=True)
    trinity_plugins.load()
    dirs = [d for d in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if d]
    others = [d for d in dirs if d not in _loaded_plugin_dirs]
    if others:
        plugin_loader.load_plugin_from_dirs(others)
        _loaded_plugin_dirs.update(others)


def one_line(error: Exception) -> str:
    """Trinity's message for a setting it rejects, on one line.

    Trinity's loader passes on OmegaConf's message, whose key and config classes follow on lines of
    their own: it becomes "<key>: <first line>". Any other message has its lines joined.
    """
    cause = error.__cause__
    key = getattr(cause, "full_key", None) if isinstance(cause, OmegaConfBaseException) else None
    if key:
        return f"{key}: {str(error).splitlines()[0]}"
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


@contextlib.contextmanager
def logs_held():
    """Hold what is printed inside the block, Trinity's log lines included (its loggers print to the stdout of the
    moment each was made), in the StringIO it yields; every logger writes to the real stdout again after it."""
    import io
    import logging

    def stream_handlers():
        loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                          if isinstance(logger, logging.Logger))]
        return [handler for logger in loggers for handler in logger.handlers
                if isinstance(handler, logging.StreamHandler)]

    held, real = io.StringIO(), sys.stdout
    for handler in stream_handlers():
        if handler.stream is real:
            handler.setStream(held)
    try:
        with contextlib.redirect_stdout(held):
            yield held
    finally:
        for handler in stream_handlers():
            if handler.stream is held:
                handler.setStream(real)


# A config field that names a registry's entry -> that registry's name, so that an unknown entry is answered with
# the names of the registry it was looked up in (an operator's entry is the `name` of an item of `operators`)
FIELD_REGISTRIES = {"selector_type": "selectors", "algorithm_type": "algorithm", "advantage_fn": "advantage_fn",
                    "kl_penalty_fn": "kl_fn", "kl_loss_fn": "kl_fn", "policy_loss_fn": "policy_loss_fn",
                    "entropy_loss_fn": "entropy_loss_fn", "sample_strategy": "sample_strategy",
                    "default_workflow_type": "workflows", "default_reward_fn_type": "reward_functions",
                    "operators": "experience_operators"}


def known_names(message: str, config: dict | None = None) -> str:
    """For Trinity's "Invalid module key: NAME" (a selector, workflow, algorithm... it has no such entry for): the
    names of the registry the field holding NAME in `config` is looked up in, with the closest suggested; with no
    such field, the registry that holds the closest name of all; else ""."""
    import difflib

    from trinity.utils.registry import Registry

    found = re.fullmatch(r".*Invalid module key: (\S+)", message)
    if not found:
        return ""
    registries = [value for name, module in list(sys.modules.items()) if name.startswith("trinity.")
                  for value in vars(module).values() if isinstance(value, Registry)]
    names = {registry.name: registry_names(registry) for registry in registries}
    registry = next((FIELD_REGISTRIES[part] for path, leaf in leaves(config or {}) if leaf == found[1]
                     for part in reversed(path) if part in FIELD_REGISTRIES), None)
    every = names.get(registry) or [name for listed in names.values() for name in listed]
    closest = difflib.get_close_matches(found[1], every, n=1, cutoff=0.5)
    if registry not in names:
        if not closest:
            return ""
        registry = next(name for name, listed in names.items() if closest[0] in listed)
    suggestion = f" did you mean {closest[0]}?" if closest else ""
    return f";{suggestion} Trinity's {registry}: {', '.join(names[registry])}"


def leaves(tree: Any, path: tuple = ()):
    """Each (path, value) of a YAML tree's leaves, the path its keys and list indices."""
    if not isinstance(tree, (dict, list)):
        yield path, tree
        return
    for key, child in tree.items() if isinstance(tree, dict) else enumerate(tree):
        yield from leaves(child, (*path, key))


def source_of(message: str, set_values: list[tuple[str, Any]]) -> str | None:
    """The `--set KEY=VALUE` a message of Trinity's is about: the last one whose key the message starts with, whose
    field it names in backquotes (as its checks of lengths do: "`max_model_len`") or by its last two parts joined
    ("over_rollout_ratio" for explorer.over_rollout.ratio), or one of whose texts (its value, or one inside a list
    or mapping given) it quotes as a word (Trinity names an unknown registry entry by its value); else None."""
    for key, value in reversed(list(set_values)):
        quoted = any(isinstance(text, str) and re.search(rf"(?<![\w.-]){re.escape(text)}(?![\w.-])", message)
                     for _, text in leaves(value))
        parts = key.split(".")
        named = f"`{parts[-1]}`" in message or (
            len(parts) > 1 and re.search(rf"(?<![\w.]){re.escape('_'.join(parts[-2:]))}(?!\w)", message) is not None)
        if message.startswith((f"{key}:", f"{key}.")) or named or quoted:
            return f"--set {key}={value}"
    return None


def build_trinity_config(config_path: str | Path, workflow_func: Callable, judge_func: Callable | None = None):
    """The validated Trinity config tune() would run for this YAML and these functions."""
    use_plugins()
    install("launcher")
    from agentscope.tuner import check_judge_function, check_workflow_function
    from agentscope.tuner._config import _to_trinity_config  # the conversion tune() itself calls

    check_workflow_function(workflow_func)
    if judge_func is not None:
        check_judge_function(judge_func)
    config = _to_trinity_config(config_path=str(config_path), workflow_func=workflow_func, judge_func=judge_func)
    return config.check_and_update()


# (the algorithm's field naming a plugin, the trinity.algorithm registry it is built from); its `<field>_args`
# become the plugin's constructor's keyword arguments
ALGORITHM_PLUGINS = (("advantage_fn", "ADVANTAGE_FN"), ("kl_penalty_fn", "KL_FN"), ("kl_loss_fn", "KL_FN"),
                     ("policy_loss_fn", "POLICY_LOSS_FN"), ("entropy_loss_fn", "ENTROPY_LOSS_FN"),
                     ("sample_strategy", "SAMPLE_STRATEGY"))


def accepted_names(cls: type) -> set[str] | None:
    """The keyword arguments `cls(...)` reads: its constructors' named parameters along the MRO, and the names
    a `**kwargs` is read by (`.get`, `.pop`, `[...]`); None where a `**kwargs` goes anywhere else, so that what
    it takes cannot be known here. A `**kwargs` that is never read takes nothing: a name in it is ignored."""
    import ast
    import inspect
    import textwrap

    names: set[str] = set()
    for klass in cls.__mro__[:-1]:  # object's takes nothing
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names |= {name for name, p in params.items() if name != "self" and p.kind not in (p.VAR_KEYWORD,
                                                                                           p.VAR_POSITIONAL)}
        rest = next((name for name, p in params.items() if p.kind is p.VAR_KEYWORD), None)
        if rest is None:
            return names
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError, SyntaxError):
            return None
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        to_super = False
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Name) and node.id == rest):
                continue
            up = parents.get(node)
            call = parents.get(up)
            if (isinstance(up, ast.Attribute) and up.attr in ("get", "pop") and isinstance(call, ast.Call)
                    and call.args and isinstance(call.args[0], ast.Constant)):
                names.add(call.args[0].value)
            elif isinstance(up, ast.Subscript) and isinstance(up.slice, ast.Constant):
                names.add(up.slice.value)
            elif isinstance(up, ast.keyword) and up.arg is None and ast.unparse(call.func) == "super().__init__":
                to_super = True
            else:  # stored, or handed to other code
                return None
        if not to_super:
            return names
    return names


def args_problem(where: str, kind: str, cls: type, args: dict) -> str | None:
    """Why `cls(**args)` would not use an argument (a name it does not read) or fail on it (a number given as
    something else), or None."""
    import difflib
    import inspect

    known = accepted_names(cls)
    defaults = {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()}
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # a hint that names what its module never imported: judge by the defaults alone
        hints = {}
    for name, value in args.items():
        if known is not None and name not in known:
            close = difflib.get_close_matches(str(name), sorted(known), n=1)
            return (f"{where}.{name}: not a setting of {kind} (it reads {', '.join(sorted(known)) or 'none'})"
                    + (f"; did you mean {close[0]}?" if close else ""))
        default = defaults.get(name)
        # a number by its default (epsilon=1e-6), or by its hint where the default is None (Optional[float])
        hint = hints.get(name)
        kinds = {t for t in typing.get_args(hint) or (hint,) if t is not type(None)}
        wants_number = (isinstance(default, (int, float)) and not isinstance(default, bool)
                        or kinds in ({int}, {float}, {int, float}))
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if wants_number and value is not None and not is_number:
            return f"{where}.{name}: {kind} reads a number here, got {value!r}"
    return None


def plugin_args_problem(trinity_config) -> str | None:
    """The first argument of the algorithm's plugins (advantage, KL, losses, sample strategy) or of an experience
    operator that its class cannot take, checked against the class Trinity will build; None if all fit."""
    import trinity.algorithm as algorithm
    from trinity.buffer.operators import EXPERIENCE_OPERATORS

    config = trinity_config.algorithm
    found = [(f"algorithm.{field}_args", f"{field} {getattr(config, field)!r}",
              getattr(algorithm, registry).get(getattr(config, field)), getattr(config, f"{field}_args") or {})
             for field, registry in ALGORITHM_PLUGINS if getattr(config, field)]
    pipeline = trinity_config.data_processor.experience_pipeline
    for index, operator in enumerate(pipeline.operators if pipeline else []):
        found.append((f"data_processor.experience_pipeline.operators.{index}.args", f"operator {operator.name!r}",
                      EXPERIENCE_OPERATORS.get(operator.name), operator.args or {}))
    for where, kind, cls, args in found:
        problem = cls is not None and isinstance(args, dict) and args_problem(where, kind, cls, args)
        if problem:
            return problem
    return None


def validate(config: dict, workflow_func: Callable, judge_func: Callable | None = None,
             config_file: str = "the config", set_values: list[tuple[str, Any]] = ()):
    """Trinity's validated config for this YAML mapping, as tune() will build it, with no side effects.

    check_and_update() creates the run's folders, so it runs on a copy whose
    checkpoint root is a scratch folder; the run's own paths are then set back.
    A setting Trinity rejects ends the program with Trinity's message, on one line (`one_line`), after the
    `--set` it came with (of `set_values`) or else `config_file`.
    """
    with tempfile.TemporaryDirectory(prefix="rftkit-check-") as scratch, logs_held() as held:
        copy_in_scratch = dict(config, checkpoint_root_dir=scratch)
        try:
            trinity_config = build_trinity_config(write_yaml(copy_in_scratch, Path(scratch) / "config.yaml"),
                                                  workflow_func, judge_func)
            # the plugins' arguments, which Trinity passes on unread, to fail at the first step; an operator that
            # Trinity has no entry for, which it takes too, is refused here as the loader refuses a selector
            problem = plugin_args_problem(trinity_config)
        except (ValueError, AssertionError) as exc:  # how Trinity's loader and check_and_update() reject settings
            message = one_line(exc)
            raise InputError(f"{source_of(message, set_values) or config_file}: {message}"
                             f"{known_names(message, copy_in_scratch)}") from None
        if problem:
            raise InputError(f"{source_of(problem, set_values) or config_file}: {problem}")
    sys.stdout.write(held.getvalue())  # valid: Trinity's notes on it, which a refusal leaves out
    trinity_config.checkpoint_root_dir = config["checkpoint_root_dir"]
    trinity_config.checkpoint_job_dir = trinity_config.get_checkpoint_job_dir()
    trinity_config.log.save_dir = os.path.join(trinity_config.checkpoint_job_dir, "log")
    job_dir = Path(trinity_config.checkpoint_job_dir)
    if not trinity_config.continue_from_checkpoint and job_dir.is_dir() and any(job_dir.iterdir()):
        # Trinity would rename the run with a timestamp; the launcher could then not find its logs.
        raise InputError(f"{job_dir} exists and continue_from_checkpoint is false: remove it, "
                         f"choose another name (--set name=...), or set continue_from_checkpoint: true")
    return trinity_config
