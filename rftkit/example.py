"""An example described once: what its main.py launches, what scripts/evaluate.py plays and reports,
what a training run of it must log. Each example defines one in <folder>/example.py; runkit.examples
lists them for the entry points, the experiments and the GPU smoke.

The workflow, the judge and the report module are named by import path and imported on first use:
they import agentscope, which takes seconds, and `main.py --help` or a bad flag should not wait for it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from rftkit.inputs import check_task_splits, open_split
from rftkit.inputs.held_out import warn_seen_tasksets

REPO = Path(__file__).resolve().parents[1]  # configs/ lies beside the packages, as in the checkout
# The one rule for relative paths, in every entry point's --help.
PATHS_RULE = ("Relative paths you type are taken from the current folder; the defaults, and the relative paths "
              "inside a config, are the checkout's (" + str(REPO) + ").")


def in_checkout(path: str | Path) -> Path:
    """A default path, or one a config names, as the checkout's: relative ones are taken from REPO."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO / path


def load(path: str) -> Callable:
    """The object at "package.module:name"."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Example:
    name: str  # evaluate.py's --task, the experiments' example argument
    title: str  # in messages: "--model oracle is a FrozenLake policy"
    main: str  # the entry point, relative to the repo
    workflow_path: str  # "module:function", the workflow_func; Ray workers import it by its module path
    judge_path: str | None  # "module:function", the judge_func
    task_key_path: str  # "module:function", a task row -> its content (rftkit.inputs.held_out): tells tasks apart
    task_columns: dict[str, str]  # the columns every task split needs (rftkit.inputs)
    task_ranges: dict[str, tuple]  # the bounds of their values: name -> (least, most), None for no bound
    data: dict[str, str]  # role ("train", "eval") -> default folder
    data_flags: dict[str, str]  # role -> main.py's flag for that folder (one flag may serve both)
    # ends every data error: how to make good data; "{flags}" in it stands for the flags that name the data folders
    data_remedy: str
    configs: dict[str, str]  # task selector -> config file, relative to the repo
    default_selector: str  # main.py's default --config
    tags: tuple[str, ...]  # tensorboard tags every training run writes (a prefix if it ends in "/")
    # The module scripts/evaluate.py plays and reports with: play (one episode -> reward, metrics, response,
    # ...), summarize (the episodes -> report.json's figures), report_rows (report.md's rows below the metric
    # table's head), chart (chart.png's matplotlib figure, untitled) and BASELINES (--model NAME: seed -> chat
    # model).
    report_module: str
    baselines: tuple[str, ...]  # the names of report_module's BASELINES, known without importing it (--help)
    # "module:function", function(folders, tasks): small data with `tasks` training tasks into `folders` (role ->
    # folder, laid out as `data`), for the GPU smoke and the step-cost measurement
    sample_writer: str
    # "module:function", a task row -> what is wrong with it or None: the columns its workflow reads where a split
    # has them (optional ones, and text that must not be empty), which task_columns' types cannot say
    task_problem_path: str | None = None

    @property
    def workflow(self) -> Callable:
        return load(self.workflow_path)

    @property
    def judge(self) -> Callable | None:
        return load(self.judge_path) if self.judge_path else None

    def write_sample(self, folders: dict[str, Path], tasks: int) -> None:
        load(self.sample_writer)(folders, tasks)

    @property
    def task_key(self) -> Callable:
        return load(self.task_key_path)

    @property
    def task_problem(self) -> Callable[[dict], str | None] | None:
        return load(self.task_problem_path) if self.task_problem_path else None

    def open_split(self, path: str | Path, flag: str | None = None):
        """The task split at `path` (given by `flag`), refused unless every row is a task of this example:
        rftkit.inputs.open_split with its columns, ranges and row check."""
        return open_split(path, self.task_columns, flag, complete=True, ranges=self.task_ranges,
                          rows=self.task_problem)

    def report(self) -> ModuleType:
        return importlib.import_module(self.report_module)

    def remedy(self, flags: str | None = None) -> str:
        """`data_remedy` for a command whose data folders `flags` names (default: main.py's data flags)."""
        launcher = " and ".join(dict.fromkeys(self.data_flags.values()))
        return self.data_remedy.format(flags=flags or launcher)

    def check_data(self, config: dict) -> None:
        """Refuse the task splits a resolved launch config names unless they exist and hold this example's columns,
        with values in their ranges and rows it can play; warn of eval tasks that the training split holds too."""
        check_task_splits(config, self.task_columns, self.remedy(), self.data_flags, self.task_ranges,
                          self.task_problem)
        warn_seen_tasksets(config, self.task_key)

    def config_path(self, selector: str | None = None) -> Path:
        return REPO / self.configs[selector or self.default_selector]
