"""The FrozenLake player: a ReActAgent that reads the grid and answers with one move."""

from __future__ import annotations

import re

from agentscope.agent import ReActAgent
from agentscope.formatter import FormatterBase, OpenAIChatFormatter
from agentscope.message import Msg
from agentscope.model import ChatModelBase

from frozenlake.env import AGENT_MAX_STEPS, normalize_action

SYSTEM_PROMPT = """\
You are playing FrozenLake on a square text grid. Reach the goal without falling into a hole.

Symbols on the grid:
  P  you            _  ice (safe)        O  hole          G  goal
  X  you, in a hole (the game is lost)   √  you, on the goal (the game is won)

Rules:
- Each turn you make exactly one move: Left, Down, Right or Up.
- The ice is not slippery: you always move one tile in the direction you choose.
- Moving into the edge of the grid leaves you where you are, but still costs the turn.
- Stepping onto a hole ends the game with reward 0. Reaching the goal gives reward 1.
- You have at most {max_steps} moves. A reply without a valid move wastes a move.

Row 1 is the top row and column 1 the leftmost column; Down increases the row, Right the column.

Think briefly about the route, then end your reply with your move inside triple backticks, \
for example: ```Right```"""

# A fenced block delimited by one to three backticks on each side.
FENCED_BLOCK = re.compile(r"`{1,3}([^`]*)`{1,3}")


class FrozenLakeAgent(ReActAgent):
    """Plays one FrozenLake episode, one `reply` per move.

    Every prompt restates the whole situation (grid, moves left, what the last
    move did), so the agent keeps no chat history between moves: each model
    call is short and stands on its own, which is also what a step-wise
    GRPO trainer sees as one experience.
    """

    def __init__(self, model: ChatModelBase, max_steps: int = AGENT_MAX_STEPS, formatter: FormatterBase | None = None):
        super().__init__(
            name="frozenlake_agent",
            sys_prompt=SYSTEM_PROMPT.format(max_steps=max_steps),
            model=model,
            formatter=formatter or OpenAIChatFormatter(),
            max_iters=2,
        )
        self.set_console_output_enabled(False)
        self.max_steps = max_steps
        self.reset()

    def reset(self) -> None:
        """Forget the previous episode."""
        self.steps_taken = 0
        self.last_action: str | None = None
        self.moved = False
        self.observation: str | None = None

    def get_prompt(self, observation: str) -> str:
        """The user message for the next move."""
        self.observation = observation
        lines = [f"Move {self.steps_taken + 1} of {self.max_steps}."]
        if self.steps_taken:
            if self.last_action is None:
                lines.append("Your last reply had no valid move in backticks, so you stayed where you were.")
            elif self.moved:
                lines.append(f"Your last move was {self.last_action}.")
            else:
                lines.append(f"Your last move was {self.last_action}, into the edge of the grid: you did not move.")
        lines += ["Current grid:", observation, "What is your next move?"]
        return "\n".join(lines)

    @staticmethod
    def get_action(msg: Msg | str | None) -> str | None:
        """The move in the reply's last fenced block ("Left", ...), or None if there is none."""
        if isinstance(msg, Msg):
            msg = msg.get_text_content()
        if not isinstance(msg, str):
            return None
        blocks = FENCED_BLOCK.findall(msg)
        return normalize_action(blocks[-1]) if blocks else None

    def update_state(self, action: str | None, observation: str) -> None:
        """Record the move just made and the grid it led to."""
        self.moved = observation != self.observation
        self.observation = observation
        self.last_action = action
        self.steps_taken += 1

    async def reply(self, msg: Msg | list[Msg] | None = None, structured_model=None) -> Msg:
        await self.memory.clear()  # see the class docstring: each move is answered from its prompt alone
        return await super().reply(msg, structured_model=structured_model)
