"""An example described once: what its main.py launches, what scripts/evaluate.py plays and reports,
what a training run of it must log. Each example defines one in <folder>/example.py; runkit.examples
lists them for the entry points, the experiments and the GPU smoke."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from rftkit.inputs import check_task_splits

REPO = Path(__file__).resolve().parents[1]  # configs/ lies beside the packages, as in the checkout


@dataclass(frozen=True)
class Example:
    name: str  # evaluate.py's --task, the experiments' example argument
    title: str  # in messages: "--model oracle is a FrozenLake policy"
    main: str  # the entry point, relative to the repo
    workflow: Callable  # workflow_func; Ray workers import it by its module path, so it stays where it is
    judge: Callable | None  # judge_func
    task_columns: dict[str, str]  # the columns every task split needs (rftkit.inputs)
    data: dict[str, str]  # role ("train", "eval") -> default folder
    data_flags: dict[str, str]  # role -> main.py's flag for that folder (one flag may serve both)
    data_remedy: str  # ends every data error: how to make good data
    configs: dict[str, str]  # task selector -> config file, relative to the repo
    default_selector: str  # main.py's default --config
    tags: tuple[str, ...]  # tensorboard tags every training run writes (a prefix if it ends in "/")
    play: Callable[[dict, Any], Awaitable[dict]]  # evaluate.py: one episode -> reward, metrics, response, ...
    summarize: Callable[[list[dict]], dict]  # evaluate.py: the episodes -> report.json's figures
    report_rows: Callable[[dict], list[str]]  # evaluate.py: report.md's rows below the metric table's head
    chart: Callable[[dict], Any]  # evaluate.py: chart.png's matplotlib figure, untitled
    baselines: dict[str, Callable[[int], Any]] = field(default_factory=dict)  # --model NAME: seed -> chat model

    def check_data(self, config: dict) -> None:
        """Refuse the task splits a resolved launch config names unless they exist and hold this example's columns."""
        check_task_splits(config, self.task_columns, self.data_remedy, self.data_flags)

    def config_path(self, selector: str | None = None) -> Path:
        return REPO / self.configs[selector or self.default_selector]
