"""benchmarks/bots_selector.py --data: Trinity's real selectors on a split with measured reference pass rates."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import REPO


def split(path, strong):
    n = len(strong)
    pq.write_table(pa.table({"question": [f"problem {i}" for i in range(n)], "answer": ["#### 1"] * n,
                             "weak_pass_rate": [0.0] * n, "strong_pass_rate": strong}), path)


def benchmark(*args):
    return subprocess.run([sys.executable, "benchmarks/bots_selector.py", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_bots_finds_the_few_tasks_the_measured_model_can_partly_solve(tmp_path):
    # 16 of 128 problems solved half the time by the strong reference, scattered; the rest never.
    strong = np.zeros(128)
    strong[np.random.default_rng(1).choice(128, 16, replace=False)] = 0.5
    split(tmp_path / "train.parquet", strong.tolist())
    result = benchmark("--data", tmp_path / "train.parquet", "--features", "weak_pass_rate", "strong_pass_rate",
                       "--steps", 30, "--out", tmp_path / "plot.png")
    assert result.returncode == 0, result.stderr[-2000:]
    bots, random = (float(part.split("=")[1]) for part in result.stdout.strip().splitlines()[-1].split()[1:])
    # Random draws an informative task 1 time in 8; BOTS, once its priors form, almost always.
    assert random < 0.25 and bots > 2 * random, result.stdout[-1500:]
    assert "selector time per batch" not in result.stdout
    assert "NO GPU DETECTED" not in result.stdout + result.stderr, "Trinity's box, for a benchmark meant for a CPU"
    assert (tmp_path / "plot.png").is_file() and len((tmp_path / "plot.csv").read_text().splitlines()) == 31


def test_a_pass_rate_outside_0_1_is_refused_naming_its_row(tmp_path):
    split(tmp_path / "train.parquet", [0.0, 0.5, 0.25, float("nan"), 1.0])
    result = benchmark("--data", tmp_path / "train.parquet", "--features", "weak_pass_rate", "strong_pass_rate",
                       "--steps", 2, "--out", tmp_path / "plot.png")
    assert result.returncode == 2
    assert "row 3: strong_pass_rate is nan, expected a pass rate in [0, 1]" in result.stderr
    assert not (tmp_path / "plot.png").exists()


def test_a_missing_feature_column_is_refused(tmp_path):
    split(tmp_path / "train.parquet", [0.0, 0.5])
    result = benchmark("--data", tmp_path / "train.parquet", "--features", "weak_pass_rate", "qwen_pass_rate",
                       "--steps", 2, "--out", tmp_path / "plot.png")
    assert result.returncode == 2 and "column 'qwen_pass_rate' is missing" in result.stderr


def test_features_without_data_are_refused():
    result = benchmark("--features", "weak_pass_rate", "strong_pass_rate", "--steps", 2)
    assert result.returncode == 2 and "error: --features: names columns of --data, give --data too" in result.stderr
