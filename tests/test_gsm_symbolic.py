"""GSM-Symbolic as the math task set: the real generator (under Python 3.12, as on the GPU machine) and the split."""

import asyncio
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from math_bots.data import split_gsm_symbolic
from math_bots.judge import gsm8k_judge
from math_bots.gsm_symbolic import LEFT_OUT, REQUIREMENT
from rftkit.inputs import InputError

from conftest import REPO


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixture_rows(templates=(11, 22, 33, 44), per_template=3) -> list[dict]:
    """Rows shaped as math_bots/gsm_symbolic.py writes them (a fixture, not the package's output)."""
    return [{"question": f"Template {t}: what is {i} + {t}?",
             "answer": f"{i} + {t} = <<{i}+{t}={i + t}>>{i + t}\n#### {i + t}", "template": t, "instance": i}
            for t in templates for i in range(per_template)]


def test_the_split_holds_whole_templates_apart():
    train, test, dropped = split_gsm_symbolic(fixture_rows(), test_templates=1, seed=0)
    train_templates = set(train.column("template").to_pylist())
    test_templates = set(test.column("template").to_pylist())
    assert len(test_templates) == 1 and len(train_templates) == 3 and not train_templates & test_templates
    assert train.num_rows == 9 and test.num_rows == 3 and not any(dropped.values())
    assert not set(train.column("question").to_pylist()) & set(test.column("question").to_pylist())
    assert split_gsm_symbolic(fixture_rows(), 1, seed=0)[1].equals(test)  # the same seed, the same split


def test_which_templates_are_held_out_does_not_depend_on_which_were_fast_enough():
    everything = [11, 22, 33, 44, 55, 66]
    _, test, _ = split_gsm_symbolic(fixture_rows(everything), 2, seed=3, templates=everything)
    _, fewer, _ = split_gsm_symbolic(fixture_rows(everything[:4]), 2, seed=3, templates=everything)
    held_out = set(test.column("template").to_pylist())
    assert set(fewer.column("template").to_pylist()) == held_out & set(everything[:4])


def test_rows_without_a_final_answer_or_seen_before_are_dropped_and_counted():
    rows = fixture_rows()
    rows += [dict(rows[0]), {**rows[1], "question": "a new one", "answer": "no marker"},
             {**rows[2], "question": "  "}, {**rows[3], "question": "another", "answer": "#### "}]
    train, test, dropped = split_gsm_symbolic(rows, test_templates=2)
    assert dropped == {"no question": 1, "no final answer": 2, "duplicate question": 1}
    assert train.num_rows + test.num_rows == 12


@pytest.mark.parametrize("count", [0, 4])
def test_a_test_split_of_no_template_or_of_all_of_them_is_refused(count):
    with pytest.raises(InputError, match=f"--test-templates {count}: expected at least 1 and fewer than the 4 "):
        split_gsm_symbolic(fixture_rows(), test_templates=count)


def python_312() -> str | None:
    """An interpreter of Python 3.12 or newer that runs (pyenv's shims may name one that is not installed)."""
    candidates = [shutil.which("python3.12"), shutil.which("python3.13"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; assert sys.version_info >= (3, 12)"], capture_output=True)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="session")
def generator_python(tmp_path_factory) -> str:
    """A Python 3.12 venv with the package from the index, as a user of the 3.11 set-up would make it (with this
    set-up's pip, which saves the venv a pip of its own)."""
    python = python_312()
    if python is None:
        pytest.skip("no Python 3.12 here; the GPU machine's Python runs the generator in-process")
    venv = tmp_path_factory.mktemp("gsm-python")
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                              REQUIREMENT], capture_output=True, text=True, timeout=600)
    if install.returncode != 0:
        pytest.skip(f"could not install {REQUIREMENT} (no package index?): {install.stderr[-500:]}")
    return str(venv / "bin" / "python")


def prepare(out: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/prepare_math_data.py", "--source", "gsm-symbolic",
                           "--processed_data_dir", str(out), *flags], cwd=REPO, capture_output=True, text=True,
                          timeout=900)


def test_the_real_generator_gives_train_and_test_splits_the_judge_can_score(generator_python, tmp_path):
    result = prepare(tmp_path / "gsm", "--per-template", "2", "--gsm-python", generator_python)
    assert result.returncode == 0, result.stderr[-3000:]
    train, test = (pq.read_table(tmp_path / "gsm" / f"{split}.parquet") for split in ("train", "test"))
    train_templates, test_templates = (set(table.column("template").to_pylist()) for table in (train, test))
    package = subprocess.run([generator_python, "-c", "import multilingual_gsm_symbolic as m; "
                              "print(*(t.id_orig for t in m.load_data('eng')))"], capture_output=True, text=True)
    templates = {int(t) for t in package.stdout.split()}
    assert len(templates) == 100 and set(LEFT_OUT) <= templates  # no id on the list is a typo
    assert train_templates | test_templates == templates - set(LEFT_OUT)  # every other template, however slow
    assert (len(train_templates), len(test_templates)) == (70, 17)  # the figures in math_bots/README.md
    assert train.num_rows + test.num_rows == 2 * 87 and not train_templates & test_templates
    assert not set(train.column("question").to_pylist()) & set(test.column("question").to_pylist())
    for row in test.to_pylist():  # the true answer, boxed, scores 1 with the project's judge; another number 0
        truth = row["answer"].split("####")[-1].strip()
        right = asyncio.run(gsm8k_judge(row, f"So the answer is \\boxed{{{truth}}}."))
        wrong = asyncio.run(gsm8k_judge(row, f"So the answer is \\boxed{{{truth}1}}."))
        assert (right.reward, wrong.reward) == (1.0, 0.0), row


def test_a_python_that_cannot_run_the_generator_is_named_in_one_line_with_how_to_make_one(tmp_path):
    how = "python3.12 -m venv .venv-gsm && .venv-gsm/bin/pip install multilingual-gsm-symbolic=="
    broken = tmp_path / "broken-python"  # an interpreter that exists but fails, as a half-removed venv's does
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.12.so' >&2\nexit 127\n")
    broken.chmod(0o755)
    expected = {
        "no-such-python-3.12": "--gsm-python no-such-python-3.12: no such interpreter;",
        sys.executable: f"--gsm-python {sys.executable}: Python {sys.version.split()[0]} there has no "
                        "multilingual-gsm-symbolic;",  # this 3.11 set-up's own interpreter
        str(broken): f"--gsm-python {broken}: does not run (exit code 127: error while loading shared libraries",
        "/usr/bin/true": "--gsm-python /usr/bin/true: not a Python interpreter (asked to run a probe, it printed "
                         "'nothing');",
        "/bin/echo": "--gsm-python /bin/echo: not a Python interpreter (asked to run a probe, it printed '-c import "
                     "sys;",
        str(tmp_path): f"--gsm-python {tmp_path}: cannot be run (Permission denied);",
    }
    for python, said in expected.items():
        result = prepare(tmp_path / "gsm", "--gsm-python", python)
        assert result.returncode != 0 and not (tmp_path / "gsm").exists()
        error = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(error) == 1 and said in error[0] and how in error[0], result.stderr


class FakeTemplate:
    """A template of the package; drawing it takes `seconds` on `clock`, the fake clock of fake_package."""

    def __init__(self, id_orig, clock, seconds=1.0, fails=False):
        self.id_orig, self.clock, self.seconds, self.fails, self.drawn = id_orig, clock, seconds, fails, False

    def generate_questions(self, n, seed, verbose):
        self.drawn = True
        self.clock[0] += self.seconds
        if self.fails:
            raise ValueError("Too many combinations")
        return [types.SimpleNamespace(question=f"q{self.id_orig}.{i}", answer=f"#### {i}") for i in range(n)]


def fake_package(monkeypatch, ids, clock, slow=(), failing=()) -> list[FakeTemplate]:
    """Templates of `ids` (those in `slow` take a day each) as the package math_bots.gsm_symbolic imports, its
    timing read from `clock`."""
    from math_bots import gsm_symbolic

    templates = [FakeTemplate(t, clock, seconds=86400.0 if t in slow else 1.0, fails=t in failing) for t in ids]
    monkeypatch.setitem(sys.modules, "multilingual_gsm_symbolic", types.SimpleNamespace(load_data=lambda _: templates))
    monkeypatch.setattr(gsm_symbolic.time, "perf_counter", lambda: clock[0])
    return templates


def test_templates_on_the_list_are_left_out_and_all_others_kept_however_slow(monkeypatch):
    from math_bots.gsm_symbolic import LEFT_OUT, generate

    listed = sorted(LEFT_OUT)[:2]
    templates = fake_package(monkeypatch, [listed[0], 1, 2, listed[1], 3], clock=[0.0], slow={1, 3})
    seconds = []
    rows, left_out = generate(per_template=2, progress=lambda done, total, took: seconds.append(took), workers=1)
    assert [row["template"] for row in rows] == [1, 1, 2, 2, 3, 3]
    assert left_out == {template: LEFT_OUT[template] for template in listed}
    assert [t.id_orig for t in templates if t.drawn] == [1, 2, 3]  # the listed ones, fast here, are not drawn
    assert seconds == [86400.0, 1.0, 86400.0]


def test_a_template_the_package_cannot_draw_fails_the_run_by_name(monkeypatch):
    from math_bots.gsm_symbolic import generate

    fake_package(monkeypatch, [1, 2, 3], clock=[0.0], failing={2})
    with pytest.raises(RuntimeError, match="^template 2: multilingual_gsm_symbolic failed to draw it: Too many"):
        generate(per_template=2, workers=1)


def test_the_split_holds_every_template_but_the_recorded_list(monkeypatch, tmp_path, capsys):
    from math_bots.gsm_symbolic import LEFT_OUT

    kept = [1, 2, 3, 4, 5]
    fake_package(monkeypatch, sorted([*LEFT_OUT, *kept]), clock=[0.0], slow={2, 4})
    prepare_math_data = load_script("prepare_math_data")
    assert prepare_math_data.main(["--source", "gsm-symbolic", "--processed_data_dir", str(tmp_path / "gsm"),
                                   "--per-template", "2", "--test-templates", "4", "--workers", "1"]) == 0
    train, test = (pq.read_table(tmp_path / "gsm" / f"{split}.parquet") for split in ("train", "test"))
    assert set(train.column("template").to_pylist()) | set(test.column("template").to_pylist()) == set(kept)
    assert train.num_rows + test.num_rows == 2 * len(kept)
    assert f"{len(LEFT_OUT)} templates left out (LEFT_OUT in math_bots/gsm_symbolic.py)" in capsys.readouterr().out


def test_the_instances_do_not_depend_on_how_many_processes_draw_them(generator_python, tmp_path):
    runs = {}
    for workers in (1, 2):
        out = tmp_path / f"{workers}.jsonl"
        subprocess.run([generator_python, "-m", "math_bots.gsm_symbolic", "--out", str(out), "--per-template", "2",
                        "--first", "8", "--workers", str(workers)], cwd=REPO, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
        runs[workers] = out.read_text()
    assert runs[1] == runs[2] and runs[1].count("\n") >= 2 * 6  # 8 templates, at most 2 of them on the list
