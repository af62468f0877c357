"""Math data for the BOTS example: guru-RL-92k's math split in GSM8K format and AIME-24, or GSM-Symbolic.

Training rows come from LLM360/guru-RL-92k (`train/math__combined_54.4k.parquet`):
a list-of-messages `prompt`, a nested `reward_model.ground_truth` and two
reference pass rates. They become

    {question, answer: "#### <ground truth>", qwen2.5_7b_pass_rate, qwen3_30b_pass_rate}

with the instruction sentence about \\boxed{} removed from the question (the
agent's system prompt asks for it). The conversion is columnar (pyarrow
compute), so 54,400 rows take well under a second.

Rows that would poison training are dropped and counted: no question, no
answer, or a pass rate that is missing, NaN or outside [0, 1] (the BOTS
estimator mixes every task's features into every posterior update, so one
NaN corrupts them all).

GSM-Symbolic's instances (math_bots/gsm_symbolic.py, generated offline) become a training and a
test split by `split_gsm_symbolic`, in the same GSM8K format.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rftkit.files import atomic_paths
from rftkit.inputs import InputError, check_columns, label, open_split

GURU_REPO = "LLM360/guru-RL-92k"
GURU_MATH_FILE = "train/math__combined_54.4k.parquet"
AIME24_REPO = "HuggingFaceH4/aime_2024"
PASS_RATE_COLUMNS = ("qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate")  # weak reference first
BOXED_INSTRUCTION = "Please output the final answer within \\boxed{}."

DEFAULT_RAW_DIR = "data/raw/guru"
DEFAULT_TRAIN_DIR = "data/math_bots/guru_math"
DEFAULT_AIME_DIR = "data/math_bots/aime24"
DEFAULT_GSM_SYMBOLIC_DIR = "data/math_bots/gsm_symbolic"  # its train.parquet and test.parquet

# What the conversion reads of a guru row, and what every converted task row holds, as `rftkit.inputs` kinds.
GURU_COLUMNS = {"prompt": "list", "reward_model": "struct", **dict.fromkeys(PASS_RATE_COLUMNS, "number")}
TASK_COLUMNS = {"question": "string", "answer": "string"}
TASK_RANGES: dict[str, tuple] = {}  # text only (the pass-rate features are checked where BOTS reads them)


def question_key(row: dict) -> str:
    """A task's question, lower-cased with its whitespace collapsed: what tells two problems apart."""
    return " ".join(str(row["question"]).lower().split())


def drop_questions(train: pa.Table, others: pa.Table) -> tuple[pa.Table, int]:
    """The training rows whose question (as question_key has it) is none of `others`' questions, and how many
    were dropped: an evaluation problem that training saw is not held out."""
    taken = {question_key({"question": q}) for q in others.column("question").to_pylist()}
    keep = [question_key({"question": q}) not in taken for q in train.column("question").to_pylist()]
    return train.filter(pa.array(keep, type=pa.bool_())), len(keep) - sum(keep)


def ground_truth(answer) -> str:
    """The final answer after "####" in a GSM8K answer, or the whole answer as text."""
    return str(answer).split("####")[-1].strip()


def task_problem(row: dict) -> str | None:
    """What is wrong with a task row, or None: a question with no text, or an answer with no ground truth
    (nothing after its "####"), which the judge would compare every reply with."""
    if not str(row["question"]).strip():
        return "column 'question' is empty; expected the problem's text"
    if not ground_truth(row["answer"]):
        return f"column 'answer' is {row['answer']!r}; expected a final answer, after \"####\" where it has one"
    return None


def guru_row(question: str, truth, weak: float | None = 0.25, strong: float | None = 0.75,
             prompt: list | None = None) -> dict:
    """One row in guru-RL-92k's math schema (what `convert_guru` reads), for tests and smoke runs."""
    return {
        "data_source": "math",
        "prompt": prompt if prompt is not None else [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"ground_truth": truth, "style": "rule"},
        "extra_info": {"index": 0},
        PASS_RATE_COLUMNS[0]: weak,
        PASS_RATE_COLUMNS[1]: strong,
    }


def _clean_text(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Strings with surrounding white space removed; empty strings become null."""
    text = pc.utf8_trim_whitespace(pc.cast(values, pa.string()))
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def convert_guru(table: pa.Table, source: str = "input") -> tuple[pa.Table, dict[str, int]]:
    """guru-shaped rows to GSM8K-format rows; returns (kept rows, dropped count per reason)."""
    check_columns(table.schema, GURU_COLUMNS, source)
    prompt, reward_model = table.column("prompt"), table.column("reward_model")
    first_message = pc.list_element(pc.if_else(pc.greater(pc.list_value_length(prompt), 0), prompt, None), 0)
    question = _clean_text(pc.replace_substring(pc.struct_field(first_message, "content"), BOXED_INSTRUCTION, ""))
    truth = _clean_text(pc.struct_field(reward_model, "ground_truth"))
    columns = {"question": question, "answer": pc.binary_join_element_wise("#### ", truth, "")}
    invalid = {"no question": pc.is_null(question), "no answer": pc.is_null(truth)}
    for name in PASS_RATE_COLUMNS:
        rate = pc.cast(table.column(name), pa.float64())
        out_of_range = pc.or_kleene(pc.less(rate, 0.0), pc.greater(rate, 1.0))
        invalid[f"{name} missing or NaN"] = pc.or_kleene(pc.is_null(rate), pc.is_nan(rate))
        invalid[f"{name} outside [0, 1]"] = pc.fill_null(out_of_range, False)
        columns[name] = rate

    # Count each dropped row under the first reason it fails.
    dropped, already = {}, np.zeros(len(table), dtype=bool)
    for reason, mask in invalid.items():
        mask = pc.fill_null(mask, True).to_numpy(zero_copy_only=False)
        dropped[reason] = int((mask & ~already).sum())
        already |= mask
    kept = pa.table(columns).filter(pa.array(~already))
    return kept, dropped


def convert_aime(table: pa.Table, source: str = "input") -> pa.Table:
    """AIME rows with problem/answer columns (any capitalisation, or question/answer) to {question, answer}."""
    by_lower = {name.lower(): name for name in table.column_names}
    question_col = by_lower.get("problem") or by_lower.get("question")
    answer_col = by_lower.get("answer")
    if question_col is None or answer_col is None:
        raise InputError(f"{source}: expected a 'problem' (or 'question') and an 'answer' column; "
                         f"columns are {table.column_names}")
    question = _clean_text(table.column(question_col))
    truth = _clean_text(pc.cast(table.column(answer_col), pa.string()))
    bad = pc.or_kleene(pc.is_null(question), pc.is_null(truth)).to_numpy(zero_copy_only=False)
    if bad.any():
        raise InputError(f"{source}: row {int(np.flatnonzero(bad)[0])} has no problem or no answer")
    return pa.table({"question": question, "answer": pc.binary_join_element_wise("#### ", truth, "")})


def read_table(path: str | Path, flag: str | None = None) -> pa.Table:
    """A parquet, jsonl or json file (given by `flag`, if any) as an arrow table with at least one row."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".json"):
        return open_split(path, {}, flag).read()
    import datasets

    if not path.is_file():
        raise InputError(f"{label(path, flag)}: no such file")
    with path.open("rb") as file:  # datasets stops on a file of nothing but blanks with a bare StopIteration
        blank = not any(chunk.strip() for chunk in iter(lambda: file.read(1 << 16), b""))  # up to the first text
    if blank:
        raise InputError(f"{label(path, flag)}: no rows")
    # datasets keeps an Arrow copy of every file it reads in the user's cache, a file that fails included: a
    # cache of its own, gone after the read, leaves nothing behind (the rows are kept in memory).
    # Its json builder logs the parser's error before raising it: quiet, so that the one line below says it.
    verbosity = datasets.utils.logging.get_verbosity()
    datasets.utils.logging.set_verbosity(datasets.utils.logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="read_table-") as cache:
        try:
            table = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=cache,
                                          keep_in_memory=True).data.table
        except datasets.exceptions.DatasetGenerationError as exc:  # its own message is generic; the cause says why
            raise InputError(f"{label(path, flag)}: not a JSON file ({exc.__cause__ or exc})") from None
        finally:
            datasets.utils.logging.set_verbosity(verbosity)
    if table.num_rows == 0:
        raise InputError(f"{label(path, flag)}: no rows")
    return table


def hub_unreachable() -> str | None:
    """Why the hub cannot be reached from here (its host name does not resolve), or None: where it resolves,
    and under HF_HUB_OFFLINE, with which the hub libraries read only their local copies, at once.

    Offline, huggingface_hub retries each request several times, waiting longer each time, before it gives up;
    a host name that does not resolve will not start resolving within those retries, so the callers stop at once.
    """
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return None
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        return f"{host} does not resolve ({exc})"
    return None


def download_guru(raw_dir: str | Path) -> Path:
    """Fetch guru-RL-92k's math file into `raw_dir` (or reuse it); a clear error when offline.

    A failed download leaves nothing behind: huggingface_hub makes `raw_dir/.cache/huggingface` (lock
    files, a partial download) before it knows that the file cannot be had, and the folders it made
    on the way are removed again.
    """
    from huggingface_hub import hf_hub_download

    raw_dir = Path(raw_dir).absolute()
    missing = [p for p in (*reversed(raw_dir.parents), raw_dir) if not p.exists()]
    # the highest folder it will make, or inside raw_dir the cache and the file's own folder
    made = missing[:1] or [raw_dir / name for name in (".cache", Path(GURU_MATH_FILE).parts[0])
                           if name != GURU_MATH_FILE and not (raw_dir / name).exists()]
    offline = hub_unreachable()
    try:
        return Path(hf_hub_download(GURU_REPO, GURU_MATH_FILE, repo_type="dataset", local_dir=str(raw_dir),
                                    local_files_only=offline is not None))
    except Exception as exc:  # noqa: BLE001 - offline, gated, renamed: all end the same way
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        why = f"{offline}; no copy in {raw_dir}" if offline else f"{type(exc).__name__}: {exc}"
        raise RuntimeError(f"could not download {GURU_REPO}/{GURU_MATH_FILE} ({why}). "
                           f"Download it elsewhere and pass --input PATH.") from exc


def load_aime24_from_hub() -> pa.Table:
    """AIME-24 from the hub, or from datasets' cache when HF_HUB_OFFLINE is set."""
    offline = hub_unreachable()
    if offline:
        raise RuntimeError(f"could not load {AIME24_REPO} ({offline}). Pass a local copy with --aime_input PATH, "
                           f"or set HF_HUB_OFFLINE=1 to use a copy in datasets' cache.")
    import datasets

    try:
        return datasets.load_dataset(AIME24_REPO, split="train").data.table
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"could not load {AIME24_REPO} ({type(exc).__name__}: {exc}). "
                           f"Pass a local copy with --aime_input PATH.") from exc


def write_split(table: pa.Table, out_dir: str | Path, split: str) -> Path:
    """Write `table` as `<out_dir>/<split>.parquet`, atomically."""
    path = Path(out_dir) / f"{split}.parquet"
    with atomic_paths(path) as (tmp,):
        pq.write_table(table, tmp)
    return path


def split_gsm_symbolic(rows: list[dict], test_templates: int, seed: int = 0,
                       templates: list[int] | None = None) -> tuple[pa.Table, pa.Table, dict]:
    """GSM-Symbolic instances (math_bots/gsm_symbolic.py's rows) as (train, test, dropped count per reason).

    The split is by template: `test_templates` of `templates` (every template of the package, including
    those left out, which give no rows; by default those in `rows`), drawn with `seed`, give the test
    split and the rest the training split. So no test problem is a training problem with other names
    and numbers, and which templates are held out does not depend on which ones are left out.
    Rows without a question or without a final answer after "####" are dropped, and so is a question
    seen before. Columns: question, answer (the GSM8K-style solution), template, instance.
    """
    import random

    kept, dropped, seen = [], dict.fromkeys(("no question", "no final answer", "duplicate question"), 0), set()
    for row in rows:
        question = str(row.get("question") or "").strip()
        answer = str(row.get("answer") or "")
        if not question:
            dropped["no question"] += 1
        elif "####" not in answer or not ground_truth(answer):
            dropped["no final answer"] += 1
        elif question in seen:
            dropped["duplicate question"] += 1
        else:
            seen.add(question)
            kept.append({"question": question, "answer": answer.strip(), "template": int(row["template"]),
                         "instance": int(row["instance"])})
    templates = sorted(set(templates) if templates is not None else {row["template"] for row in kept})
    if not 0 < test_templates < len(templates):
        raise InputError(f"--test-templates {test_templates}: expected at least 1 and fewer than the "
                         f"{len(templates)} templates")
    held_out = set(random.Random(seed).sample(templates, test_templates))

    def table(rows_: list[dict]) -> pa.Table:
        return pa.Table.from_pylist(rows_, schema=pa.schema([("question", pa.string()), ("answer", pa.string()),
                                                             ("template", pa.int64()), ("instance", pa.int64())]))

    return (table([r for r in kept if r["template"] not in held_out]),
            table([r for r in kept if r["template"] in held_out]), dropped)


def write_sample(folders: dict[str, Path], tasks: int) -> None:
    """Small data for the GPU smoke and the step-cost measurement, through the same conversions as real data:
    `tasks` guru-shaped multiplication problems with spread-out pass rates, and 8 AIME-shaped ones to evaluate."""
    rows = [guru_row(f"What is {i} times {i + 3}? {BOXED_INSTRUCTION}", str(i * (i + 3)), weak=(i % 10) / 10,
                     strong=min(1.0, (i % 10) / 10 + 0.3)) for i in range(tasks)]
    train, _ = convert_guru(pa.Table.from_pylist(rows))
    aime = [{"problem": f"Find the remainder when {7 ** i} is divided by 1000.", "answer": str(7 ** i % 1000)}
            for i in range(8)]
    write_split(train, folders["train"], "train")
    write_split(convert_aime(pa.Table.from_pylist(aime)), folders["eval"], "test")
