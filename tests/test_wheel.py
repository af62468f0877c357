"""The package as a wheel: every module of the project's packages is in it, so that `pip install .` (not only the
editable install the README uses) imports the launcher and the experiments."""

import shutil
import subprocess
import sys
import zipfile

from conftest import REPO

PACKAGE_ROOTS = ("experiments", "frozenlake", "math_bots", "rftkit", "runkit", "standins")


def test_the_wheel_holds_every_module_of_the_projects_packages(tmp_path):
    source = tmp_path / "source"  # a copy: setuptools builds in the source's build/, which would outlive the test
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for root in PACKAGE_ROOTS:
        shutil.copytree(REPO / root, source / root, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "wheel"), "--quiet"], check=True, cwd=tmp_path, timeout=300)
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    in_wheel = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    modules = {str(path.relative_to(REPO)) for root in PACKAGE_ROOTS for path in (REPO / root).rglob("*.py")
               if "__pycache__" not in path.parts}
    assert modules - in_wheel == set()
    assert {"rftkit/inputs/__init__.py", "experiments/bots_comparison/__init__.py", "rftkit/launch.py"} <= in_wheel
