"""Rebuild a Trinity-RFT run's tensorboard scalars from the launch's console output, for a run whose monitor/
folder was lost (a GPU hold that brought back the output but not the run's folder):

    python scripts/monitor_from_log.py LOG RUN [--year YYYY]

Trinity-RFT 0.6.0's tensorboard monitor prints every step's scalars as it writes them, one line per step and
role, which Ray prefixes with the role's actor:
`(Explorer pid=N) INFO MM-DD HH:MM:SS [monitor.py:L] Step S: {'tag': value, ...}`.
Those lines become event files in RUN/monitor/tensorboard/{explorer,trainer}, where the reports here
(scripts/plot_runs.py, scripts/step_timeline.py) read a run's scalars. Floats are as printed, to 6 significant
digits; a point's time is its line's, to the second, read as UTC (the GPU machines' clock; only differences
within a run are read) in --year (the lines have none; default: this year).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from rftkit.cli import ArgumentParser
from rftkit.files import atomic_folder, check_writable
from rftkit.inputs import InputError, reports_input_errors

LINE = re.compile(r"\((Explorer|Trainer) pid=\d+\)\S*\s+INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[monitor\.py:\d+\] "
                  r"Step (\d+): \{(.*)\}\s*$")
ITEM = re.compile(r"'([^']+)': ([^,]+)(?:, |$)")


def scalars(log: Path, year: int) -> dict[str, list[tuple[str, float, int, float]]]:
    """Each role's points in `log`, as (tag, value, step, wall time) in the order they were printed."""
    points = defaultdict(list)
    with open(log, errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            found = LINE.search(line)
            if not found:
                continue
            role, stamp, step, items = found.groups()
            try:
                wall_time = datetime.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S").replace(
                    tzinfo=timezone.utc).timestamp()
            except ValueError:
                raise InputError(f"LOG {log}, line {number}: {stamp!r} is not a time of {year} "
                                 f"(MM-DD HH:MM:SS)") from None
            for tag, text in ITEM.findall(items):
                try:
                    value = float(text)
                except ValueError:  # a string, a list or a bool: not a scalar
                    continue
                points[role.lower()].append((tag, value, int(step), wall_time))
    return dict(points)


def write(points: dict[str, list[tuple[str, float, int, float]]], run: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter  # the writer Trinity-RFT's tensorboard monitor uses

    with atomic_folder(run / "monitor") as partial:
        for role, role_points in points.items():
            writer = SummaryWriter(str(partial / "tensorboard" / role))
            for tag, value, step, wall_time in role_points:
                writer.add_scalar(tag, value, step, walltime=wall_time)
            writer.close()


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python scripts/monitor_from_log.py", description=__doc__)
    parser.add_argument("log", metavar="LOG", type=Path, help="the launch's console output")
    parser.add_argument("run", metavar="RUN", type=Path, help="the run's folder, to get monitor/tensorboard")
    parser.add_argument("--year", type=int, default=datetime.now().year,
                        help="the year the run ran in (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 1970 <= args.year <= 9999:
        parser.error(f"--year {args.year}: expected the year the run ran in")
    if not args.log.is_file():
        raise InputError(f"LOG {args.log}: " + ("a folder, expected the launch's output" if args.log.is_dir()
                                                 else "no such file"))
    if (args.run / "monitor").exists():
        raise InputError(f"RUN {args.run}: already has monitor/; this writes a new one")
    check_writable(args.run, "RUN")
    points = scalars(args.log, args.year)
    if not points:
        raise InputError(f"LOG {args.log}: no Trinity-RFT monitor lines with a number "
                         f"('(Explorer pid=N) INFO MM-DD HH:MM:SS [monitor.py:L] Step S: {{...}}')")
    write(points, args.run)
    for role, role_points in sorted(points.items()):
        steps = {step for _, _, step, _ in role_points}
        print(f"{role}: {len(role_points)} points of {len({tag for tag, *_ in role_points})} scalars, "
              f"steps {min(steps)} to {max(steps)}")
    print(f"wrote {args.run / 'monitor' / 'tensorboard'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
