"""scripts/install_cpu.sh refuses to start on a disk without room for a new .venv, and says so."""

import shutil
import subprocess

from conftest import REPO


def run_install(folder, **env):
    """The install script copied into an empty project folder, run there with env added."""
    (folder / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "install_cpu.sh", folder / "scripts")
    return subprocess.run(["bash", "scripts/install_cpu.sh"], cwd=folder, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env})


def test_too_little_disk_ends_before_anything_is_written(tmp_path):
    result = run_install(tmp_path, INSTALL_NEED_GIB=str(10**9))  # more than any disk has
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {tmp_path}: ")
    assert "MiB free on this disk; a new .venv needs about 1000000000 GiB" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]


def test_enough_disk_goes_on_to_make_the_venv(tmp_path):
    # A stand-in interpreter that only reports being asked to make the venv, the step after the check.
    interpreter = tmp_path / "stand-in-python"
    interpreter.write_text("#!/bin/sh\necho \"asked: $*\" >&2\nexit 3\n")
    interpreter.chmod(0o755)
    result = run_install(tmp_path, INSTALL_NEED_GIB="0", PYTHON=str(interpreter))
    assert (result.returncode, result.stderr) == (3, "asked: -m venv .venv\n")
