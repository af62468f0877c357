"""Small data for every registered example, written by the example's own `sample_writer`: what the GPU
smoke, the resume smoke and the step-cost measurement train on. Each example's data lies below the work
folder as its defaults lie below the repo (`Example.data`)."""

from __future__ import annotations

from pathlib import Path

from rftkit.example import Example
from runkit.examples import EXAMPLES


def sample_data(example: Example, work: Path) -> dict[str, Path]:
    """The folders of `example`'s small data below `work`, by role."""
    return {role: work / folder for role, folder in example.data.items()}


def make_data(work: Path, tasks: int = 64) -> None:
    """Every example's small data below `work`, with `tasks` training tasks each."""
    for example in EXAMPLES.values():
        example.write_sample(sample_data(example, work), tasks)
