"""The suite's two processes keep each of conftest.SERIAL_GROUPS in one process only if pytest-xdist's `loadgroup`
works with the pytest installed: xdist 3.8.0 groups by the node ids it rewrites, and pytest 9.2 stopped reading
them (every test then went to either process, and the Ray tests raced each other's clusters)."""

import subprocess
import sys

from conftest import SERIAL_GROUPS

TESTS = """
import os, pathlib, time
def write(name):
    time.sleep(0.2)  # long enough that the other process would take some of them
    pathlib.Path(os.environ["OUT"], name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))
""" + "".join(f"def test_{n}():\n    write('{n}')\n" for n in range(8))


def test_a_group_added_at_collection_runs_in_one_process(tmp_path):
    assert "test_trainer_speed.py" in SERIAL_GROUPS["ray"]
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        item.add_marker(pytest.mark.xdist_group('ray'))  # as tests/conftest.py marks the Ray tests\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repo's options
    (tmp_path / "test_grouped.py").write_text(TESTS)
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                             "-c", str(tmp_path / "pytest.ini"), "--numprocesses", "2", "--dist", "loadgroup",
                             str(tmp_path)], cwd=tmp_path, env={"OUT": str(out), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    workers = {path.read_text() for path in out.iterdir()}
    assert len(list(out.iterdir())) == 8 and len(workers) == 1, workers
