"""The examples this project ships, by name, and their configs by file name.

It lives above the examples (they import rftkit, this imports them), so rftkit never imports an
example."""

from pathlib import Path

from frozenlake.example import FROZENLAKE
from math_bots.example import MATH
from rftkit.example import Example

EXAMPLES: dict[str, Example] = {example.name: example for example in (FROZENLAKE, MATH)}
# config file name -> (its example, its task selector), in the examples' order
CONFIGS: dict[str, tuple[Example, str]] = {Path(config).name: (example, selector) for example in EXAMPLES.values()
                                           for selector, config in example.configs.items()}
