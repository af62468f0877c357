"""Random FrozenLake maps and their shortest paths.

A map is a list of equal-length strings over four letters:

    S  start (ice)     F  frozen ice     H  hole     G  goal

`generate_map(size, p, seed)` draws one map and nothing else: every tile is
ice with probability `p`, otherwise a hole, and then S and G are put on two
different tiles. The same `(size, p, seed)` always gives the same map, so a
dataset row needs to store only those three numbers.

A map may be unsolvable. `shortest_path(desc)` answers that question with a
breadth-first search over the non-slippery moves, so the data script can keep
only maps whose *shortest* route fits in the episode's step budget (a
depth-first "is G reachable" check accepts maps whose only route is too long).
"""

from __future__ import annotations

from collections import deque

import numpy as np

# Same order as Gymnasium's action ids (0 Left, 1 Down, 2 Right, 3 Up).
ACTIONS = ("Left", "Down", "Right", "Up")
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}

P_RANGE = (0.6, 0.85)
TILES = "SFHG"  # a map's letters, as above


def generate_map(size: int, p: float, seed: int) -> list[str]:
    """Draw a `size` x `size` map with ice probability `p`, reproducibly from `seed`."""
    if size < 2:
        raise ValueError(f"size must be at least 2 (S and G need two tiles), got {size}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    rng = np.random.default_rng(seed)
    grid = np.where(rng.random((size, size)) < p, "F", "H")
    start, goal = rng.choice(size * size, size=2, replace=False)
    grid.flat[start] = "S"
    grid.flat[goal] = "G"
    return ["".join(row) for row in grid]


def task_map(task: dict) -> list[str]:
    """The map a task row plays: its `desc` where it has one, else generate_map(size, p, seed)."""
    desc = task.get("desc")
    if desc is not None:
        return [str(row) for row in desc]
    return generate_map(int(task["size"]), float(task["p"]), int(task["seed"]))


def find(desc: list[str], letter: str) -> tuple[int, int]:
    """Row and column of the first `letter` in the map."""
    for r, row in enumerate(desc):
        c = row.find(letter)
        if c >= 0:
            return r, c
    raise ValueError(f"map has no {letter!r} tile: {desc}")


def neighbours(desc: list[str], cell: tuple[int, int]):
    """(action, next cell) for each move that stays on the map, in `ACTIONS` order."""
    for action in ACTIONS:
        dr, dc = MOVES[action]
        nxt = (cell[0] + dr, cell[1] + dc)
        if 0 <= nxt[0] < len(desc) and 0 <= nxt[1] < len(desc[0]):
            yield action, nxt


def distances_to_goal(desc: list[str]) -> dict[tuple[int, int], int]:
    """Fewest non-slippery moves from each cell to G without entering a hole (unreachable cells absent).

    One breadth-first search backwards from G; moves are symmetric, so it
    gives every cell's forward distance at once.
    """
    goal = find(desc, "G")
    distance = {goal: 0}
    frontier = deque([goal])
    while frontier:
        cell = frontier.popleft()
        for _, nxt in neighbours(desc, cell):
            if nxt not in distance and desc[nxt[0]][nxt[1]] != "H":
                distance[nxt] = distance[cell] + 1
                frontier.append(nxt)
    return distance


def optimal_action(desc: list[str], distance: dict, cell: tuple[int, int]) -> str | None:
    """The first move in `ACTIONS` order that brings `cell` one step closer to G, or None."""
    if cell not in distance or distance[cell] == 0:
        return None
    return next(action for action, nxt in neighbours(desc, cell) if distance.get(nxt) == distance[cell] - 1)


def shortest_path(desc: list[str]) -> list[str] | None:
    """One shortest action sequence from S to G on the non-slippery map, or None.

    Holes end the episode, so the route never steps onto one. Among equally
    short routes, each move is the first in `ACTIONS` order that keeps it shortest.
    """
    distance = distances_to_goal(desc)
    cell = find(desc, "S")
    if cell not in distance:
        return None
    path = []
    while distance[cell] > 0:
        action = optimal_action(desc, distance, cell)
        path.append(action)
        cell = (cell[0] + MOVES[action][0], cell[1] + MOVES[action][1])
    return path


def shortest_path_length(desc: list[str]) -> int | None:
    """Number of moves on a shortest route from S to G, or None when G is unreachable."""
    path = shortest_path(desc)
    return None if path is None else len(path)
