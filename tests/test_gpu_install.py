"""scripts/install_gpu.sh's resolution, checked on CPU: for Python 3.12 on Linux x86-64 the package index gives
every locked version, torch 2.11.0 and numpy 2 (uv resolves only; nothing is downloaded but metadata)."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = (REPO / "scripts" / "install_gpu.sh").read_text()


def pins(text: str) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s#;]+)", text, flags=re.MULTILINE)
    return {name.lower().replace("_", "-").replace(".", "-"): version for name, version in found}


def script_sources() -> list[str]:
    """The script's `sources=(...)` array: what it hands to uv."""
    (body,) = re.findall(r"^sources=\((.*?)\)$", SCRIPT, flags=re.MULTILINE | re.DOTALL)
    return shlex.split(body.replace("\\\n", " "))


def test_the_script_installs_the_lock_and_the_base_with_the_lock_as_overrides():
    sources = script_sources()
    assert sources == ["-r", "requirements/lock-gpu.txt", "-r", "requirements/gpu-base.txt",
                       "--override", "requirements/lock-gpu.txt", "--override", "requirements/gpu-overrides.txt"]


def test_the_gpu_set_resolves_for_python_3_12_on_linux(tmp_path):
    out = tmp_path / "resolved.txt"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CACHE": "1"}
    files = [arg for arg in script_sources() if arg != "-r"]  # compile takes the requirement files as they are
    result = subprocess.run([sys.executable, "-m", "uv", "pip", "compile", "--quiet", "--python-version", "3.12",
                             "--python-platform", "x86_64-manylinux_2_28", *files, "-o", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    if result.returncode != 0 and re.search(r"dns error|Failed to fetch|error sending request", result.stderr):
        pytest.skip(f"the package index is out of reach: {result.stderr[-300:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    resolved = pins(out.read_text())
    locked = pins((REPO / "requirements" / "lock-gpu.txt").read_text())
    differ = {name: (version, resolved.get(name)) for name, version in locked.items() if resolved.get(name) != version}
    assert differ == {}, differ  # exactly the set that ran
    assert resolved["torch"] == "2.11.0" and resolved["numpy"].startswith("2.")
    assert "flash-attn" not in resolved


def test_the_import_check_that_ends_both_gpu_installs_runs_here():
    result = subprocess.run([sys.executable, "scripts/check_gpu_imports.py"], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "imports OK" in result.stdout and "trinity-rft    0.6.0" in result.stdout
