"""The house plan, checked: imports run down the layers, nothing imports in a circle, no code outside
tests/ changes sys.path, every imported folder is a package, every folder says what it holds, and no
folder holds more than about a fifth of the code.

Each ALLOWED_TODAY lists the violations still to be fixed. A new one fails, and so does one that was
fixed but is still listed: delete it, so that the lists only shrink.
"""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from rftkit import cluster
from runkit.examples import EXAMPLES

# An import goes to a lower layer or stays in its own folder: the examples never import each other,
# nor do the entry-point folders.
LAYERS = {
    "rftkit": 0,  # launching a run, and the inputs and files every entry point shares
    **{Path(example.main).parts[0]: 1 for example in EXAMPLES.values()},  # the examples, as registered
    "runkit": 2,  # what drives the examples from outside: their registry, command lines, steps, models
    "standins": 2.5,  # stand-ins for what a CPU machine lacks, for the tests and benchmarks only (uses runkit)
    "scripts": 3, "experiments": 3, "benchmarks": 3,  # entry points
    "tests": 4,  # the tests, and the GPU smoke harness they run (tests/gpu)
}
FILES = sorted(p for folder in LAYERS for p in (REPO / folder).rglob("*.py"))
TREES = {path: ast.parse(path.read_text(), str(path)) for path in FILES}


def module_names(path: Path) -> list[str]:
    """The names `path` is imported by: its dotted name, and a bare one for tests/' own files (on sys.path)."""
    parts = path.relative_to(REPO).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return [".".join(parts), *([parts[-1]] if parts[0] == "tests" and len(parts) == 2 else [])]


MODULES = {name: path for path in FILES for name in module_names(path)}


def imports(tree: ast.AST) -> set[Path]:
    """The project's files that `tree` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]  # a module, or a name in one
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                found.add(MODULES[name])
    return found


GRAPH = {path: imports(tree) - {path} for path, tree in TREES.items()}


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def top(path: Path) -> str:
    return path.relative_to(REPO).parts[0]


def folder(path: Path) -> str:
    return str(path.parent.relative_to(REPO))


def on_a_cycle(graph: dict) -> set:
    """The nodes that can reach themselves."""
    def reachable(start):
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return seen
    return {node for node in graph if node in reachable(node)}


def same_as_allowed(found: set, allowed: set) -> None:
    assert not found - allowed, f"new violations: {sorted(found - allowed)}"
    assert not allowed - found, f"fixed, so delete them from ALLOWED_TODAY: {sorted(allowed - found)}"


def test_every_folder_with_python_has_a_layer():
    unplaced = {top(path) for path in REPO.glob("*/*.py")} - set(LAYERS)
    assert not unplaced, f"{sorted(unplaced)}: an example is registered in runkit/examples.py, anything else in LAYERS"


ALLOWED_UPWARD_TODAY: set[tuple[str, str]] = set()


def test_no_import_runs_back_up():
    found = {(relative(a), relative(b)) for a, targets in GRAPH.items() for b in targets
             if top(a) != top(b) and LAYERS[top(b)] >= LAYERS[top(a)]}
    same_as_allowed(found, ALLOWED_UPWARD_TODAY)


def test_no_module_cycle():
    assert sorted(map(relative, on_a_cycle(GRAPH))) == []


def test_no_folder_cycle():
    folders = {}
    for a, targets in GRAPH.items():
        folders.setdefault(folder(a), set()).update(folder(b) for b in targets if folder(b) != folder(a))
    assert on_a_cycle(folders) == set()


def test_only_tests_and_benchmarks_use_the_standins():
    users = {top(a) for a, targets in GRAPH.items() for b in targets if top(b) == "standins" and top(a) != "standins"}
    assert users <= {"tests", "benchmarks"}


ALLOWED_SYS_PATH_TODAY: set[str] = set()


def changes_sys_path(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("sys.path."):
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AugAssign)) and any(ast.unparse(t).startswith("sys.path")
                                                                  for t in targets):
            return True
    return False


def test_no_sys_path_change_outside_tests():
    found = {relative(path) for path, tree in TREES.items() if top(path) != "tests" and changes_sys_path(tree)}
    same_as_allowed(found, ALLOWED_SYS_PATH_TODAY)


def test_the_checkouts_root_is_defined_once():
    """Everything else imports rftkit.example.REPO."""
    defined = [path.relative_to(REPO).as_posix() for path, tree in TREES.items() for node in ast.walk(tree)
               if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REPO" for t in node.targets)]
    assert defined == ["rftkit/example.py"]


def test_every_imported_folder_is_a_package():
    folders = {b.parent.relative_to(REPO) for targets in GRAPH.values() for b in targets if top(b) != "tests"}
    folders |= {parent for f in folders for parent in f.parents if parent != Path(".")}
    assert sorted(str(f) for f in folders if not (REPO / f / "__init__.py").is_file()) == []


ALLOWED_SILENT_TODAY: set[str] = set()


def test_every_folder_says_what_it_holds():
    def says(path: Path) -> bool:
        init = path / "__init__.py"
        return (path / "README.md").is_file() or init.is_file() and bool(ast.get_docstring(ast.parse(init.read_text())))
    found = {folder(path) for path in FILES if not says(path.parent)}
    same_as_allowed(found, ALLOWED_SILENT_TODAY)


LONG = 400  # lines; a longer module says at its top why it is one module


def test_a_long_module_says_why_it_is_one():
    long = {relative(path) for path in FILES if top(path) != "tests" and len(path.read_text().splitlines()) > LONG}
    assert {name for name in long if "Why one module:" not in (ast.get_docstring(TREES[REPO / name]) or "")} == set()


FIFTH = 0.21
ALLOWED_LARGE_TODAY: set[str] = set()


def test_no_folder_holds_more_than_a_fifth_of_the_code():
    lines = {}
    for path in FILES:
        if top(path) != "tests":  # the tests are outside the measure
            lines[folder(path)] = lines.get(folder(path), 0) + len(path.read_text().splitlines())
    total = sum(lines.values())
    same_as_allowed({name for name, count in lines.items() if count > FIFTH * total}, ALLOWED_LARGE_TODAY)


def test_reading_a_config_and_a_dry_run_import_what_they_need_only(sample_work):
    """Resolving a config (the YAML, the flags, the cluster plan) loads no torch; a whole dry run of each
    example loads no report module (rftkit.reports: plotting, tensorboard files)."""
    code = """
import sys
from rftkit import cluster
from rftkit.overrides import apply_overrides, load_yaml, resolve_config
config = apply_overrides(load_yaml("configs/frozenlake.yaml"), {"buffer.batch_size": 4})
cluster.apply_plan(resolve_config(config, {}, "configs/frozenlake.yaml"), cluster.plan_cluster(1, 2, 1, None))
assert "torch" not in sys.modules, "resolving a config imported torch"
"""
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    data = {"frozenlake/main.py": ["--data-dir", str(sample_work / "data" / "frozenlake")],
            "math_bots/main.py": ["--config", "configs/config_random.yaml",
                                  "--train-dir", str(sample_work / "data" / "math_bots" / "guru_math"),
                                  "--eval-dir", str(sample_work / "data" / "math_bots" / "aime24")]}
    for main, flags in data.items():
        code = f"""
import atexit, runpy, sys
sys.argv = [{main!r}, "--dry-run", "--gpus", "2", *{flags!r}]
# the script ends the process (rftkit.cli.exit_now), running atexit's handlers
atexit.register(lambda: print(sorted(name for name in sys.modules if name.startswith("rftkit.reports"))))
runpy.run_path({main!r}, run_name="__main__")
"""
        result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
        assert "the config is valid" in result.stdout, result.stdout[-1500:] + result.stderr[-1500:]
        assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout[-1500:]


def test_a_launch_refused_for_its_inputs_imports_neither_agentscope_nor_torch(tmp_path):
    """Flags, YAML and data are checked before the workflow (agentscope) is imported, and no GPU is counted
    with torch on a machine without NVIDIA's driver: a mistake is reported in about a second."""
    code = f"""
import runpy, sys
sys.argv = ["frozenlake/main.py", "--dry-run", "--data-dir", {str(tmp_path / "absent")!r}]
try:
    runpy.run_path("frozenlake/main.py", run_name="__main__")
except SystemExit as exit:
    print("exit", exit.code)
print(sorted(name for name in ("agentscope", "torch") if name in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert "absent: no such folder" in result.stderr, result.stderr[-1500:]
    nvidia = os.path.exists(cluster.NVIDIA_DRIVER) or shutil.which("nvidia-smi")  # then torch counts the GPUs
    expected = ["exit 2", "['torch']" if nvidia else "[]"]
    assert result.stdout.strip().splitlines()[-2:] == expected, result.stdout[-1500:]
