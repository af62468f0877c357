"""The math agent's one tool, execute_python_code: agentscope's tool as the model sees it (name,
arguments, JSON schema, result text), run in a sandbox (sandbox.py: limits, namespaces, a fresh
directory)."""

from __future__ import annotations

from agentscope.tool import Toolkit

from math_bots.python_tool import sandbox

# Seconds a single code execution may run; a runaway loop costs one tool call, not the rollout.
CODE_TIMEOUT = sandbox.WALL_SECONDS


def make_toolkit(code_timeout: float = CODE_TIMEOUT) -> Toolkit:
    """The agent's one tool: agentscope's execute_python_code as the model sees it, run in the sandbox."""
    toolkit = Toolkit()
    toolkit.register_tool_function(sandbox.execute_python_code, preset_kwargs={"timeout": code_timeout},
                                   json_schema=sandbox.tool_schema())
    return toolkit
