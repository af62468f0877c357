"""requirements/lock-gpu.txt and gpu-base.txt: consistent with each other, the CPU lock and pyproject.toml.

Offline and fast: only the files and the installed vllm's metadata are read.
"""

import importlib.metadata
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import REPO

REQS = REPO / "requirements"

# Packages pinned differently in lock-cpu.txt and lock-gpu.txt on purpose, with the reason.
# None today: the machine-specific ones (torch, numpy, pandas, tokenizers, triton) are not in the GPU
# lock at all but come from the GPU base (gpu-base.txt); test_base_and_lock_are_disjoint guards that.
ALLOWED_DIFFERENCES: dict[str, str] = {}


def requirement_lines(path):
    """The requirement part of each line, comments and blank lines dropped."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def pins(path):
    """{normalised name: version} of a file of name==version lines."""
    result = {}
    for line in requirement_lines(path):
        name, version = line.split("==")
        result[canonicalize_name(name)] = version
    return result


def test_every_lock_line_is_an_exact_pin():
    lines = requirement_lines(REQS / "lock-gpu.txt")
    # the exact set the GPU machine installs: changing it should be a deliberate edit here too
    assert len(lines) == 106
    for line in lines:
        req = Requirement(line)
        assert not req.extras and req.marker is None, line  # --no-deps ignores both anyway
        (spec,) = req.specifier  # exactly one specifier...
        assert spec.operator == "==", line  # ...and it pins
        Version(spec.version)  # a real version, not a wildcard


def test_no_duplicate_names():
    names = [canonicalize_name(Requirement(line).name) for line in requirement_lines(REQS / "lock-gpu.txt")]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert duplicates == []


def test_versions_shared_with_the_cpu_lock_agree():
    gpu = pins(REQS / "lock-gpu.txt")
    cpu = pins(REQS / "lock-cpu.txt") | pins(REQS / "nodeps.txt")
    shared = gpu.keys() & cpu.keys()
    assert len(shared) > 50  # most of the set is common: an empty overlap would mean a parsing mistake
    differ = {name: (cpu[name], gpu[name]) for name in shared if cpu[name] != gpu[name]}
    assert differ.keys() == ALLOWED_DIFFERENCES.keys(), differ


def test_stack_pins_match_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {}
    for line in project["dependencies"] + project["optional-dependencies"]["gpu"]:
        req = Requirement(line)
        for spec in req.specifier:
            if spec.operator == "==":
                declared[canonicalize_name(req.name)] = spec.version
    gpu = pins(REQS / "lock-gpu.txt")
    expected = {"agentscope": "1.0.21", "trinity-rft": "0.6.0", "verl": "0.8.0", "transformers": "5.24.0",
                "vllm": "0.23.0"}
    for name, version in expected.items():
        assert declared[name] == gpu[name] == version, name


def base_requirements():
    return [Requirement(line) for line in requirement_lines(REQS / "gpu-base.txt")]


def test_base_torch_is_the_torch_that_locked_vllm_pins():
    vllm = pins(REQS / "lock-gpu.txt")["vllm"]
    # the CPU venv carries the same vllm wheel (requirements/nodeps.txt): its metadata holds the pin
    assert importlib.metadata.version("vllm") == vllm
    vllm_reqs = [Requirement(r) for r in importlib.metadata.requires("vllm")]
    (vllm_pin,) = [str(r.specifier) for r in vllm_reqs if r.name == "torch" and r.marker is None]
    (base_torch,) = [str(r.specifier) for r in base_requirements() if r.name == "torch"]
    assert base_torch == vllm_pin == "==2.11.0"


def test_base_and_lock_are_disjoint():
    # a name in both would be replaced by the --no-deps install, defeating the point of the base
    base = {canonicalize_name(r.name) for r in base_requirements()}
    assert base & pins(REQS / "lock-gpu.txt").keys() == set()
    assert {"torch", "numpy", "pandas", "tokenizers", "triton"} <= base


def test_base_numpy_is_2():
    (numpy,) = [r for r in base_requirements() if r.name == "numpy"]
    assert numpy.specifier.contains("2.5.2") and not numpy.specifier.contains("1.26.4")


def test_build_script_sdist_builds_are_in_the_lock():
    script = (REPO / "scripts" / "build_wheelhouse.sh").read_text()
    (names,) = re.findall(r'^sdist_only="(.*)"$', script, flags=re.MULTILINE)
    assert names.split() and set(names.split()) <= pins(REQS / "lock-gpu.txt").keys()
