"""guru-RL-92k to GSM8K-format conversion, on a guru-shaped parquet written here."""

import subprocess
import tempfile
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from math_bots.data import BOXED_INSTRUCTION, convert_aime, convert_guru, guru_row
from rftkit.inputs import InputError

from conftest import REPO


GOOD = [guru_row(f"What is {i} + {i}? {BOXED_INSTRUCTION}", str(2 * i), weak=i / 20, strong=min(1.0, i / 10))
        for i in range(10)]
BAD = {
    "no question": [guru_row("   ", "1"), guru_row("x", "1", prompt=[])],
    "no answer": [guru_row("Q", None), guru_row("Q", " ")],
    "qwen2.5_7b_pass_rate missing or NaN": [guru_row("Q", "1", weak=None), guru_row("Q", "1", weak=float("nan"))],
    "qwen2.5_7b_pass_rate outside [0, 1]": [guru_row("Q", "1", weak=-0.1)],
    "qwen3_30b_pass_rate missing or NaN": [guru_row("Q", "1", strong=float("nan"))],
    "qwen3_30b_pass_rate outside [0, 1]": [guru_row("Q", "1", strong=1.01)],
}


@pytest.fixture
def guru_parquet(tmp_path):
    path = tmp_path / "math__combined.parquet"
    rows = [row for bad in BAD.values() for row in bad] + GOOD
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_conversion_keeps_good_rows_in_gsm8k_format(guru_parquet):
    kept, dropped = convert_guru(pq.read_table(guru_parquet))
    assert kept.column_names == ["question", "answer", "qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate"]
    rows = kept.to_pylist()
    assert len(rows) == len(GOOD)
    assert rows[3] == {"question": "What is 3 + 3?", "answer": "#### 6",
                       "qwen2.5_7b_pass_rate": 0.15, "qwen3_30b_pass_rate": 0.3}
    assert all(BOXED_INSTRUCTION not in r["question"] for r in rows)
    assert dropped == {reason: len(rows) for reason, rows in BAD.items()}


def test_conversion_names_a_missing_column():
    table = pa.Table.from_pylist([guru_row("Q", "1")]).drop_columns(["qwen3_30b_pass_rate"])
    with pytest.raises(InputError, match="guru.parquet: column 'qwen3_30b_pass_rate' is missing"):
        convert_guru(table, source="guru.parquet")


def test_aime_conversion_accepts_hub_column_names():
    table = pa.table({"id": [1, 2], "Problem": ["Find x.", "Find y."], "Answer": [33, 204]})
    assert convert_aime(table).to_pylist() == [{"question": "Find x.", "answer": "#### 33"},
                                               {"question": "Find y.", "answer": "#### 204"}]
    with pytest.raises(InputError, match="row 1"):
        convert_aime(pa.table({"problem": ["a", None], "answer": ["1", "2"]}))


def test_script_writes_splits_report_and_plot(guru_parquet, tmp_path):
    aime = tmp_path / "aime.parquet"
    pq.write_table(pa.table({"problem": ["P1", "P2", "P3"], "answer": ["1", "2", "3"]}), aime)
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "prepare_math_data.py"), "--input", str(guru_parquet),
         "--processed_data_dir", str(tmp_path / "train"), "--aime_input", str(aime),
         "--aime_dir", str(tmp_path / "aime24")], capture_output=True, text=True, check=True).stdout
    assert f"read {len(GOOD) + 9} rows" in out and f"kept {len(GOOD)}" in out
    assert "dropped      2  no answer" in out and "pass-rate histogram" in out
    assert pq.read_table(tmp_path / "train" / "train.parquet").num_rows == len(GOOD)
    assert pq.read_table(tmp_path / "aime24" / "test.parquet").column("answer").to_pylist()[0] == "#### 1"
    assert (tmp_path / "train_pass_rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == ["train.parquet"]  # one format per folder


def test_a_training_question_that_is_an_aime_question_is_dropped_and_counted(guru_parquet, tmp_path):
    """Decontamination: an AIME-24 problem in the training file, with other case and spacing, leaves training."""
    aime = tmp_path / "aime.parquet"
    pq.write_table(pa.table({"problem": ["what is 3  +\n3?", "P2"], "answer": ["6", "2"]}), aime)
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "prepare_math_data.py"), "--input", str(guru_parquet),
         "--processed_data_dir", str(tmp_path / "train"), "--aime_input", str(aime),
         "--aime_dir", str(tmp_path / "aime24")], capture_output=True, text=True, check=True).stdout
    assert f"kept {len(GOOD) - 1}" in out and "dropped      1  question also in the AIME-24 eval split" in out
    questions = pq.read_table(tmp_path / "train" / "train.parquet").column("question").to_pylist()
    assert "What is 3 + 3?" not in questions and "What is 4 + 4?" in questions


def test_script_offline_without_input_fails_clearly(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "prepare_math_data.py"), "--raw_data_dir", str(tmp_path / "raw"),
         "--processed_data_dir", str(tmp_path / "train")],
        capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "could not download LLM360/guru-RL-92k" in result.stderr and "--input" in result.stderr
    assert not (tmp_path / "train").exists()
    assert not (tmp_path / "raw").exists(), "the hub's lock files and the folders made for them are removed"


def test_a_failed_download_into_an_existing_folder_removes_only_what_it_made(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from math_bots.data import download_guru

    def unreachable_hub(repo_id, filename, repo_type, local_dir, **_):  # a stand-in: what the real one leaves offline
        lock = Path(local_dir) / ".cache" / "huggingface" / "download" / (filename + ".lock")
        lock.parent.mkdir(parents=True)
        lock.touch()
        (Path(local_dir) / filename).parent.mkdir(parents=True, exist_ok=True)
        raise LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable_hub)
    monkeypatch.setattr("math_bots.data.hub_unreachable", lambda: None)  # the failure comes from the stand-in
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "mine.txt").write_text("kept")
    with pytest.raises(RuntimeError, match="could not download .*LocalEntryNotFoundError: offline"):
        download_guru(raw)
    assert [p.name for p in raw.iterdir()] == ["mine.txt"]


def unresolvable_host(monkeypatch):
    import socket

    def fail(host, port, *args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "getaddrinfo", fail)


def test_a_host_that_does_not_resolve_ends_the_download_at_once_or_reuses_the_copy(tmp_path, monkeypatch):
    import time

    from math_bots.data import GURU_MATH_FILE, download_guru

    unresolvable_host(monkeypatch)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="huggingface.co does not resolve .*; no copy in .*--input PATH"):
        download_guru(tmp_path / "raw")
    assert time.monotonic() - began < 5, "no retries against a host name that does not resolve"
    assert not (tmp_path / "raw").exists()

    copy = tmp_path / "raw" / GURU_MATH_FILE
    copy.parent.mkdir(parents=True)
    copy.write_bytes(b"downloaded before")
    assert download_guru(tmp_path / "raw") == copy


def test_aime_from_an_unresolvable_hub_fails_at_once_naming_the_ways_round(monkeypatch):
    from math_bots.data import load_aime24_from_hub

    unresolvable_host(monkeypatch)
    with pytest.raises(RuntimeError, match="does not resolve.*--aime_input PATH, or set HF_HUB_OFFLINE=1"):
        load_aime24_from_hub()


def test_script_rejects_a_file_of_the_wrong_shape(tmp_path):
    wrong = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"question": ["Q"], "answer": ["1"]}), wrong)
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_math_data.py"), "--input", str(wrong),
                             "--processed_data_dir", str(tmp_path / "train")], capture_output=True, text=True)
    assert result.returncode == 2 and f"error: --input {wrong}: column 'prompt' is missing" in result.stderr
    assert not (tmp_path / "train").exists()


def test_script_says_a_broken_json_lines_file_once(tmp_path):
    """datasets' json builder logs the parser's error before raising it; the script's one line says it alone."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1 + 1?", "answer": "2"}\n{"problem": "2 + 2?", "answer": \n')
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "prepare_math_data.py"), "--input", str(bad),
                             "--processed_data_dir", str(tmp_path / "train")], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("JSON parse error") == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: --input {bad}: not a JSON file (JSON parse")
    assert not (tmp_path / "train").exists()


def test_script_offline_with_input_writes_train_and_warns_about_aime(guru_parquet, tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "prepare_math_data.py"), "--input", str(guru_parquet),
         "--processed_data_dir", str(tmp_path / "train"), "--aime_dir", str(tmp_path / "aime24")],
        capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    assert pq.read_table(tmp_path / "train" / "train.parquet").num_rows == len(GOOD)
    assert "AIME-24 eval split not written" in result.stderr and "--aime_input" in result.stderr
    assert not (tmp_path / "aime24").exists()


def test_a_json_lines_file_is_read_without_leaving_a_cache_behind(tmp_path, monkeypatch):
    """datasets' json reader keeps an Arrow copy in the user's cache unless told otherwise, a failed read's too."""
    import datasets

    from math_bots.data import read_table

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # where it would write
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    good, bad = tmp_path / "rows.jsonl", tmp_path / "bad.jsonl"
    good.write_text('{"problem": "1 + 1?", "answer": "2"}\n{"problem": "2 + 2?", "answer": "4"}\n')
    bad.write_text('{"problem": "1 + 1?"\nnot json\n')
    assert read_table(good).to_pydict() == {"problem": ["1 + 1?", "2 + 2?"], "answer": ["2", "4"]}
    with pytest.raises(InputError, match=f"{bad}: not a JSON file"):
        read_table(bad)
    assert not (tmp_path / "cache").exists() and list((tmp_path / "scratch").iterdir()) == []
