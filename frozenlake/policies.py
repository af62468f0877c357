"""Baseline FrozenLake policies written as agentscope chat models.

They read the grid from the agent's own prompt and answer in the agent's own
format, so they run through exactly the code path a real LLM does:

* `OracleModel` walks a shortest path (it scores 1.0 on every solvable map);
* `RandomModel` picks a uniformly random move (the floor any policy should beat).
"""

from __future__ import annotations

import random

from agentscope.message import TextBlock
from agentscope.model import ChatModelBase, ChatResponse

from frozenlake.env import PLAYER_SYMBOLS, TILE_SYMBOLS
from frozenlake.maps import ACTIONS, shortest_path
from rftkit.reports.evaluation import message_text

# Rendered symbol -> map letter, with the player's tile read as the start.
LETTER_OF = {"_": "F", "O": "H", "G": "G", "P": "S", "X": "H", "√": "G"}
GRID_SYMBOLS = set(TILE_SYMBOLS.values()) | set(PLAYER_SYMBOLS.values())


def last_user_text(messages: list[dict]) -> str:
    """The text of the last user message in OpenAI chat format."""
    return next((message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")


def grid_from_prompt(text: str) -> list[str]:
    """The map, as S/F/H/G rows with S under the player, from a rendered grid in `text`."""
    rows = [line.split() for line in text.splitlines()]
    rows = [row for row in rows if row and set(row) <= GRID_SYMBOLS]
    return ["".join(LETTER_OF[symbol] for symbol in row) for row in rows]


class _MovePolicy(ChatModelBase):
    """A chat model that answers every prompt with one move in backticks."""

    def __init__(self, model_name: str):
        super().__init__(model_name=model_name, stream=False)

    def choose(self, grid: list[str]) -> str:
        raise NotImplementedError

    async def __call__(self, messages: list[dict], tools=None, tool_choice=None, structured_model=None,
                       **kwargs) -> ChatResponse:
        move = self.choose(grid_from_prompt(last_user_text(messages)))
        return ChatResponse(content=[TextBlock(type="text", text=f"```{move}```")])


class OracleModel(_MovePolicy):
    """Follows a shortest path from the player's tile to the goal."""

    def __init__(self):
        super().__init__("oracle")

    def choose(self, grid: list[str]) -> str:
        try:
            path = shortest_path(grid)
        except (ValueError, IndexError):  # no grid, or no player or goal on it
            path = None
        return path[0] if path else ACTIONS[0]  # no route: any move will do


class RandomModel(_MovePolicy):
    """Moves uniformly at random; seeded for reproducible runs."""

    def __init__(self, seed: int = 0):
        super().__init__("random")
        self.rng = random.Random(seed)

    def choose(self, grid: list[str]) -> str:
        return self.rng.choice(ACTIONS)
