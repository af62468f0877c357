"""The user's inputs to the entry points: a bad one ends the program with a message, never a traceback.

An `InputError` names the file, row, column, key or flag at fault and says what
was expected. Every entry point's main() is wrapped in `reports_input_errors`,
which prints it as `error: <message>` on stderr; the exit status is 2, as
argparse gives for a bad flag (1 is left for runs that fail: training, a download).

Here: the error, and reading what every entry point shares (task splits, JSON files, config keys). Beside it:
config_keys.py  a run's config against Trinity-RFT's config classes (`--set` keys, sections, counts)
model_path.py   a model path: a folder as transformers saves one, or a GGUF file where the caller converts those
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from rftkit import keys
from rftkit.trinity_plugins import digest


class InputError(SystemExit):
    """Input that cannot be used. `str()` is the message; the exit status is 2.

    A SystemExit, so that it ends the program from wherever the input is
    checked, with no traceback and no handler in between.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2  # what the program exits with; the message stays in args, and so in str()


class Interrupted(InputError):
    """Ctrl-C, said by the entry point in one line that tells what became of its work; exit status 130."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 130


def reports_input_errors(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap an entry point's main(): print an InputError as `error: <message>` on one line, then let it end the
    program; a Ctrl-C that main() does not say more of ends it with one line too, and exit status 130."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except InputError as exc:
            close_progress_bars()
            # one line, whatever a library's message quoted in it holds (pyarrow's thrift errors hold newlines)
            print("error: " + " ".join(line.strip() for line in str(exc).splitlines() if line.strip()), file=sys.stderr)
            raise
        except KeyboardInterrupt:
            close_progress_bars()
            print("error: interrupted (Ctrl-C)", file=sys.stderr)
            raise SystemExit(130) from None

    return wrapper


def close_progress_bars() -> None:
    """Close the tqdm bars still open, so that what is printed next starts on its own line. A Ctrl-C that lands
    while a bar is being made, after it has drawn itself but before its `with` block is entered, leaves it open,
    with no newline after it."""
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


@contextlib.contextmanager
def ctrl_c_kept():
    """Within: a Ctrl-C that a C extension turned into its own error is raised as the KeyboardInterrupt it was.
    numpy's item assignment does that: a Ctrl-C landing inside it comes out as "Error setting single item of
    array.", with no trace of the interrupt. For synchronous code: asyncio.run keeps its own Ctrl-C handling only
    where Python's default handler is in place."""
    import signal

    pressed = []

    def on_ctrl_c(signum, frame):
        pressed.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    except Exception as exc:
        if pressed:
            raise KeyboardInterrupt from exc
        raise
    finally:  # None: the handler before was not Python's
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


def open_text(path: str | Path):
    """`path` opened to read text, through gzip where its name ends in .gz (how records kept under docs/ are)."""
    import gzip

    return gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8")


def read_json(path: Path, lines: bool = False, flag: str | None = None) -> Any:
    """The JSON value in the file at `path` (given by `flag`, if any), or with `lines` the value on each of its
    non-blank lines; an InputError naming the file, and the line, where it cannot be read as such. A name ending
    in .gz is read through gzip."""
    import json

    where = label(path, flag)
    try:
        with open_text(path) as file:
            text = file.read()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InputError(f"{where}: cannot read it as text ({exc})") from None
    values = []
    for number, chunk in enumerate(text.splitlines() if lines else [text], 1):
        try:
            values += [json.loads(chunk)] if chunk.strip() or not lines else []
        except json.JSONDecodeError as exc:
            at = f"line {number}: not JSON" if lines else f"not JSON at line {exc.lineno}"
            raise InputError(f"{where}: {at} ({exc.msg}); a file cut short?") from None
    return values if lines else values[0]


def label(path: str | Path, flag: str | None = None) -> str:
    """How messages name an input file: with the flag that gave it, if any."""
    return f"{flag} {path}" if flag else str(path)


# The kinds of values a required column may be asked for: the test of its arrow type, and the words for messages.
KINDS = {
    "integer": (pa.types.is_integer, "an integer"),
    "number": (lambda t: pa.types.is_integer(t) or pa.types.is_floating(t), "a number"),
    "string": (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "a string"),
    "list": (lambda t: pa.types.is_list(t) or pa.types.is_large_list(t), "a list"),
    "struct": (pa.types.is_struct, "a struct"),
}


def check_columns(schema: pa.Schema, columns: dict[str, str], where: str) -> None:
    """Refuse `schema` unless it has every column of `columns` (name: kind, a key of KINDS)."""
    for name, kind in columns.items():
        if name not in schema.names:
            raise InputError(f"{where}: column {name!r} is missing (expected columns {', '.join(columns)})")
        is_kind, words = KINDS[kind]
        if not is_kind(schema.field(name).type):
            raise InputError(f"{where}: column {name!r} has type {schema.field(name).type}, expected {words}")


def open_split(path: str | Path, columns: dict[str, str], flag: str | None = None,
               complete: bool = False, ranges: dict[str, tuple] | None = None,
               rows: Callable[[dict], str | None] | None = None) -> pq.ParquetFile:
    """The parquet file at `path` (given by `flag`, if any), checked to have `columns` and at least one row, with
    `complete` (tasks) a value in each of those columns in every row, each column of `ranges` (name: (least,
    most), None for no bound) within its bounds, and, given `rows` (a row -> what is wrong with it, or None), every
    row as a task of its example: the columns it reads where a split has them, which no schema requires.

    Without `rows`, only the footer and the bounded columns are read; the caller reads the rows it needs.
    """
    where = label(path, flag)
    if Path(path).is_dir():
        raise InputError(f"{where}: a folder, expected a parquet file")
    if not Path(path).is_file():
        raise InputError(f"{where}: no such file")
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{where}: not a parquet file ({exc})") from None
    check_columns(parquet.schema_arrow, columns, where)
    if parquet.metadata.num_rows == 0:
        raise InputError(f"{where}: no rows")
    for name in columns if complete else []:
        if null_count(parquet, name):
            rows = [i for i, value in enumerate(parquet.read(columns=[name]).column(name).to_pylist()) if value is None]
            raise InputError(f"{where}: column {name!r} is empty (null) in row {rows[0]}"
                             + (f" and {len(rows) - 1} more" if len(rows) > 1 else "") + "; every task needs a value")
    bounded = parquet.read(columns=list(ranges)).to_pydict() if ranges else {}
    for name, (least, most) in (ranges or {}).items():
        check_range(bounded[name], name, least, most, where)
    for number, row in enumerate(parquet.read().to_pylist() if rows else []):
        if problem := rows(row):
            raise InputError(f"{where}: row {number}: {problem}")
    return parquet


def check_range(values: list, name: str, least, most, where: str) -> None:
    """Refuse a column whose values fall outside [least, most] (None: no bound; NaN is outside any), naming
    the first row that does and its value."""
    outside = [i for i, value in enumerate(values) if value is not None and not (
        (least is None or value >= least) and (most is None or value <= most))]
    if outside:
        bounds = f"{least} to {most}" if None not in (least, most) else \
            f"{least} or more" if most is None else f"{most} or less"
        raise InputError(f"{where}: column {name!r} is {values[outside[0]]!r} in row {outside[0]}"
                         + (f" and outside its range in {len(outside) - 1} more rows" if len(outside) > 1 else "")
                         + f"; expected {bounds}")


def null_count(parquet: pq.ParquetFile, name: str) -> int:
    """How many rows have no value in the top-level column `name`, from the footer's statistics (0 where a
    writer left them out, or for a nested column)."""
    metadata = parquet.metadata
    leaf = next((i for i in range(metadata.num_columns) if metadata.schema.column(i).path == name), None)
    if leaf is None:
        return 0
    counts = [metadata.row_group(g).column(leaf).statistics for g in range(metadata.num_row_groups)]
    return sum(stats.null_count for stats in counts if stats is not None and stats.has_null_count)


TRAIN_TASKSET = "buffer.explorer_input.taskset"
# Trinity-RFT's difficulty-based selector and this project's resumable one: exactly two features, which Trinity
# checks only when its explorer builds the selector, minutes into a run.
BOTS_SELECTORS = ("difficulty_based", digest.NAME)
# What Trinity-RFT 0.6.0's BOTS selector reads from its `kwargs` (DifficultyBasedSelector and its estimator;
# tests/test_bad_inputs.py holds this to Trinity's source): name -> (kind, least, most), None for no bound.
BOTS_KWARGS = {"m": ("int", 1, None), "lamb": ("number", 0, 1), "rho": ("number", 0, 1), "tau": ("number", 0, None),
               "target_reward": ("number", 0, 1), "do_sample": ("bool", None, None),
               "adaptive_rho": ("bool", None, None)}
PASS_RATE_SUFFIX = "_pass_rate"  # how the reference columns that BOTS reads are named


def get_key(config: dict, dotted: str, config_file: str) -> Any:
    """`config["a"]["b"]` for "a.b", or exit naming the key that `config_file` lacks."""
    if not keys.has(config, dotted):
        raise InputError(f"{config_file}: no key {dotted} (expected a Trinity-RFT config like those in configs/)")
    return keys.get(config, dotted)


def taskset_entries(config: dict) -> list[tuple[Any, str]]:
    """(taskset, its dotted key) for the training taskset and each eval taskset the config has, unchecked."""
    explorer_input = keys.get(config, "buffer.explorer_input") or {}
    evals = explorer_input.get("eval_tasksets")
    return [(explorer_input.get("taskset"), TRAIN_TASKSET),
            *((taskset, f"buffer.explorer_input.eval_tasksets.{i}")
              for i, taskset in enumerate(evals if isinstance(evals, list) else []))]


def tasksets(config: dict, config_file: str = "the config") -> list[tuple[dict, str]]:
    """(taskset, its dotted key) for the training taskset and each eval taskset, or exit naming the one at fault."""
    get_key(config, keys.TRAIN_TASKSET_PATH_KEY, config_file)  # eval tasksets are optional
    if not isinstance(config["buffer"]["explorer_input"].get("eval_tasksets") or [], list):
        raise InputError(f"{config_file}: buffer.explorer_input.eval_tasksets: expected a list of tasksets")
    found = taskset_entries(config)
    for taskset, key in found:
        if not isinstance(taskset, dict) or not isinstance(taskset.get("path"), str):
            raise InputError(f"{config_file}: {key}: expected a taskset with a path (a folder)")
    return found


def check_task_splits(config: dict, columns: dict[str, str], remedy: str, flags: dict[str, str] | None = None,
                      ranges: dict[str, tuple] | None = None, rows: Callable[[dict], str | None] | None = None) -> None:
    """Refuse the task splits a resolved launch config names unless each exists and has `columns`, rows, and
    values within `ranges`, each row a task by `rows` (open_split's).

    A taskset reads `<path>/<split>.parquet`, and its selector's feature keys must be number columns there too,
    from 0 to 1 (BOTS reads them as pass rates), two different ones, the lower on average first (the weaker
    reference model's). `flags` (role "train" or "eval" -> the flag that sets its folder)
    and `remedy` (how to make good data) end every message, so that it says how to fix the input.
    """
    flags = flags or {}
    for taskset, key in tasksets(config):
        role = "train" if key == TRAIN_TASKSET else "eval"
        folder, split = Path(taskset["path"]), taskset.get("split", "train")
        name = f" {taskset['name']}" if taskset.get("name") else ""
        how = f"{'the training' if role == 'train' else 'an eval'} taskset{name}, split {split!r}" + \
            (f"; {flags[role]} sets its folder" if role in flags else "")
        if not folder.is_dir():
            raise InputError(f"{folder}: no such folder ({how}); {remedy}")
        path = folder / f"{split}.parquet"
        if not path.exists():
            raise InputError(f"{path}: no such file ({how}); {remedy}")
        selector_name = "data_selector" if taskset.get("data_selector") else "task_selector"  # Trinity reads both
        selector = taskset.get(selector_name) or {}
        bots = selector.get("selector_type") in BOTS_SELECTORS
        check_selector_kwargs(selector, f"{key}.{selector_name}")
        features = (selector.get("feature_keys") or []) if bots else []  # only BOTS reads them
        if bots and len(features) != 2:
            raise InputError(f"{key}.{selector_name}.feature_keys: {selector.get('selector_type')} (BOTS) reads two "
                             f"pass-rate columns, the weaker reference's first; got {features}")
        if bots and features[0] == features[1]:
            raise InputError(f"{key}.{selector_name}.feature_keys: {features[0]} twice; BOTS reads a weaker and a "
                             f"stronger reference model's pass rates, the weaker's first")
        try:
            open_split(path, {**columns, **dict.fromkeys(features, "number")}, complete=True,
                               ranges={**(ranges or {}), **dict.fromkeys(features, (0.0, 1.0))}, rows=rows)
        except InputError as exc:
            rates = other_pass_rates(path, features)
            if rates:
                remedy = (f"this split has {', '.join(rates)}: name them, weakest first, with "
                          f"--set {key}.{selector_name}.feature_keys=[{','.join(rates)}]")
            elif any(f"column {name!r} is missing" in str(exc) for name in features):
                remedy = (f"BOTS starts from reference models' pass rates per task, and this split has none: add two "
                          f"with scripts/add_pass_rates.py (from evaluations of a weaker and a stronger model on "
                          f"it), or choose tasks at random, which reads none "
                          f"(--set {key}.{selector_name}.selector_type=random)")
            raise InputError(f"{exc}; {remedy}") from None
        if bots:
            means = list(column_means(path, features).values())
            if means[0] > means[1]:
                raise InputError(f"{key}.{selector_name}.feature_keys: {features[0]} (mean {means[0]:.3f} on {path}) "
                                 f"is the stronger reference, {features[1]} the weaker ({means[1]:.3f}); BOTS reads "
                                 f"the weaker's first: --set {key}.{selector_name}.feature_keys="
                                 f"[{features[1]},{features[0]}]")


def registry_names(registry) -> list[str]:
    """The names a Trinity-RFT registry has an entry for: those registered, and those it imports when first asked."""
    return sorted({*registry.modules, *getattr(registry, "_default_mapping", {})})


def check_selector_kwargs(selector: dict, where: str) -> None:
    """Refuse a selector's `kwargs` that its code does not read, or of a kind or range it cannot use: Trinity takes
    them without a look, and a bad one fails at the first update, after the whole GPU start-up."""
    import difflib

    from trinity.buffer.selector import SELECTORS

    kwargs = selector.get("kwargs") or {}
    kind = selector.get("selector_type") or "sequential"  # Trinity-RFT's default
    if kind not in {*registry_names(SELECTORS), digest.NAME}:
        return  # no selector of Trinity's: its own check says so, with the names it has
    if not isinstance(kwargs, dict):
        raise InputError(f"{where}.kwargs: expected a mapping of settings, got {kwargs!r}")
    known = BOTS_KWARGS if kind in BOTS_SELECTORS else {}
    for name, value in kwargs.items():
        if name not in known:
            close = difflib.get_close_matches(str(name), list(known), n=1)
            reads = f"it reads {', '.join(sorted(known))}" if known else "it reads none"
            raise InputError(f"{where}.kwargs.{name}: not a setting of the {kind} selector ({reads})"
                             + (f"; did you mean {close[0]}?" if close else ""))
        expected, least, most = known[name]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = {"bool": isinstance(value, bool), "int": number and float(value).is_integer(), "number": number}
        inside = not number or ((least is None or value >= least) and (most is None or value <= most))
        if not (fits[expected] and inside):
            bounds = {"bool": "true or false", "int": "a whole number", "number": "a number"}[expected]
            bounds += "" if expected == "bool" else (f" from {least} to {most}" if most is not None else
                                                    f" of {least} or more")
            raise InputError(f"{where}.kwargs.{name}: expected {bounds}, got {value!r}")


def other_pass_rates(path: Path, features: list[str]) -> list[str]:
    """The split's pass-rate columns, lowest mean first, when `features` names columns it lacks; else []."""
    try:
        names = pq.read_schema(path).names
        rates = [name for name in names if name.endswith(PASS_RATE_SUFFIX)]
        if not rates or set(features) <= set(names):
            return []
        means = column_means(path, rates)
    except (pa.ArrowException, OSError):  # not a parquet file: the error says so already
        return []
    return sorted(rates, key=means.get)


def column_means(path: Path, names: list[str]) -> dict[str, float]:
    """The mean of each of the split's columns `names`, in that order (a null counts as 0): how pass-rate columns
    are told weaker from stronger."""
    values = pq.read_table(path, columns=names).to_pydict()
    return {name: sum(x or 0 for x in values[name]) / max(1, len(values[name])) for name in names}
