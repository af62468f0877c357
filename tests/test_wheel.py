"""The package as a wheel: every module of the project's packages is in it, so that `pip install .` (not only the
editable install the README uses) imports the launcher and the experiments."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import REPO

PACKAGE_ROOTS = ("experiments", "frozenlake", "math_bots", "rftkit", "runkit", "standins")


def build_wheel(tmp_path) -> Path:
    """The project's wheel, built from a copy of its packages (setuptools builds in the source's build/, which
    would outlive the test)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for root in PACKAGE_ROOTS:
        shutil.copytree(REPO / root, source / root, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheel"), "--quiet"], check=True, cwd=tmp_path, timeout=300)
    return next((tmp_path / "wheel").glob("*.whl"))


def project_modules() -> list[str]:
    """Every module of the project's packages, dotted (`__main__` files aside: running them is their import)."""
    names = []
    for root in PACKAGE_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if "__pycache__" not in parts and parts[-1] != "__main__":
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_wheel_holds_every_module_of_the_projects_packages(tmp_path):
    wheel = build_wheel(tmp_path)
    in_wheel = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    modules = {str(path.relative_to(REPO)) for root in PACKAGE_ROOTS for path in (REPO / root).rglob("*.py")
               if "__pycache__" not in path.parts}
    assert modules - in_wheel == set()
    assert {"rftkit/inputs/__init__.py", "experiments/bots_comparison/__init__.py", "rftkit/launch.py"} <= in_wheel


IMPORT_ALL = """
import importlib, sys
names = sys.argv[1:]
for name in names:
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.prefix), (name, module.__file__)  # the venv's copy, not the checkout's
print("imported", len(names))
"""


def test_the_wheel_installed_in_an_empty_venv_imports_every_module(tmp_path):
    """Installed with pip into a venv of its own (its dependencies from this environment, on PYTHONPATH, where
    the checkout's editable install is not: `.pth` files there are not read), from a folder outside the
    checkout."""
    import os
    import site

    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
                    str(wheel)], check=True, timeout=300)
    modules = project_modules()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(site.getsitepackages())}
    result = subprocess.run([str(python), "-c", IMPORT_ALL, *modules], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == f"imported {len(modules)}"
