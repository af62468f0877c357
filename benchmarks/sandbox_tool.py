"""Per-call cost of the sandboxed Python tool against agentscope's plain execute_python_code.

Both run the same short snippet in this process, alternating so that machine load affects them alike;
the figures are medians over the calls.

    python benchmarks/sandbox_tool.py [calls]
"""

import asyncio
import statistics
import time

from agentscope.tool import execute_python_code as plain_tool

from math_bots.python_tool import sandbox
from rftkit.cli import ArgumentParser, at_least

SNIPPET = "print(25 + 49)"


async def timed_call(tool) -> float:
    start = time.perf_counter()
    response = await tool(SNIPPET, timeout=sandbox.WALL_SECONDS)
    elapsed = time.perf_counter() - start
    assert "<stdout>74\n</stdout>" in response.content[0]["text"], response  # both really ran the code
    return elapsed


async def measure(calls: int) -> dict[str, list[float]]:
    await timed_call(sandbox.execute_python_code)  # the first call picks the plan: not a per-call cost
    times = {"plain": [], "sandbox": []}
    for _ in range(calls):
        times["plain"].append(await timed_call(plain_tool))
        times["sandbox"].append(await timed_call(sandbox.execute_python_code))
    return times


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("calls", nargs="?", type=at_least(1), default=20, help="calls of each tool")
    calls = parser.parse_args(argv).calls
    times = asyncio.run(measure(calls))
    plain_ms, sandbox_ms = (1000 * statistics.median(times[name]) for name in ("plain", "sandbox"))
    print(f"{calls} calls each of {SNIPPET!r}, median per call:")
    print(f"  agentscope execute_python_code  {plain_ms:7.1f} ms")
    print(f"  sandboxed execute_python_code   {sandbox_ms:7.1f} ms   ({sandbox_ms / plain_ms:.2f}x)")
    print(f"  enforced here: {sandbox.enforced()}")


if __name__ == "__main__":
    main()
