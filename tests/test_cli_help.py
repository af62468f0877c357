"""Every command line of the project has a help text for each argument and says each option's default in --help."""

import argparse
import importlib.util
import sys

import pytest

from conftest import REPO
from rftkit.cli import has_default

FOLDERS = ("scripts", "experiments", "tests/gpu", "runkit", "benchmarks", "frozenlake", "math_bots")
COMMANDS = sorted(str(path.relative_to(REPO)) for folder in FOLDERS
                  for path in (REPO / folder).glob("*.py") if "ArgumentParser(" in path.read_text())


class Built(Exception):
    def __init__(self, parser):
        self.parser = parser


def built_parser(relative: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser a command's main() builds, caught as it is about to parse."""
    def catch(self, *args, **kwargs):
        raise Built(self)

    monkeypatch.setattr(sys, "argv", [relative])
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    spec = importlib.util.spec_from_file_location(f"cli_{relative.replace('/', '_')[:-3]}", REPO / relative)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    with pytest.raises(Built) as caught:
        module.main()
    return caught.value.parser


def test_the_commands_are_found():
    expected = {"scripts/evaluate.py", "scripts/get_frozenlake_data.py", "frozenlake/main.py", "tests/gpu/smoke.py"}
    assert expected <= set(COMMANDS)


@pytest.mark.parametrize("relative", COMMANDS)
def test_every_option_with_a_default_shows_it(relative, monkeypatch):
    parser = built_parser(relative, monkeypatch)
    formatter = parser._get_formatter()
    hidden = [action.option_strings or action.dest for action in parser._actions
              if action.help != argparse.SUPPRESS and has_default(action)  # 0 too: `0 in (False,)` is true
              and not (action.help and "%(default)" in formatter._get_help_string(action))]  # no help, no line
    assert hidden == [], f"{relative}: --help does not show the defaults of {hidden}"
    assert "(default: 6)" in " ".join(parser.format_help().split()) or relative != "scripts/get_frozenlake_data.py"


@pytest.mark.parametrize("relative", COMMANDS)
def test_every_argument_has_a_help_text(relative, monkeypatch):
    """Each option and positional argument says what it is for (hidden ones, help=SUPPRESS, aside). Whether an
    option without a default says what leaving it out does is for the reader; evaluate.py's are checked below."""
    parser = built_parser(relative, monkeypatch)
    bare = [action.option_strings or action.dest for action in parser._actions
            if action.help != argparse.SUPPRESS and not (action.help or "").strip()]
    assert bare == [], f"{relative}: no help text for {bare}"


def test_evaluate_says_what_its_limit_and_seed_default_to(monkeypatch):
    parser = built_parser("scripts/evaluate.py", monkeypatch)
    lines = {action.dest: " ".join(parser._get_formatter()._expand_help(action).split())
             for action in parser._actions}
    assert "(default: all of the split)" in lines["limit"]
    assert "(default: 0)" in lines["seed"]
    assert lines["task"] and lines["model"]


@pytest.mark.parametrize("relative", COMMANDS)
def test_every_flag_has_a_hyphen_spelling(relative, monkeypatch):
    """Flags are spelled with hyphens; an underscore spelling (upstream's data script has them) is a second name."""
    parser = built_parser(relative, monkeypatch)
    lacking = [flag for action in parser._actions for flag in action.option_strings
               if "_" in flag and flag.replace("_", "-") not in action.option_strings]
    assert lacking == [], f"{relative}: no hyphen spelling for {lacking}"


HEAVY = ("torch", "agentscope", "trinity", "verl", "ray", "vllm", "transformers")


@pytest.mark.parametrize("script", ["frozenlake/main.py", "math_bots/main.py", "scripts/evaluate.py"])
def test_the_entry_points_answer_help_without_the_training_stack(script):
    """--help and a bad flag come back in well under a second: the stack (seconds to import) loads at launch,
    or at the first episode."""
    import subprocess

    probe = (f"import runpy, sys\nsys.argv = [{script!r}, '--help']\ntry:\n"
             f"    runpy.run_path({script!r}, run_name='__main__')\nexcept SystemExit:\n    pass\n"
             f"print('loaded:', sorted(name for name in {HEAVY!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert "usage:" in result.stdout, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "loaded: []"


def test_a_dry_run_validates_with_trinity_without_importing_verl(frozenlake_data, tmp_path):
    """Trinity's validator imports verl only to read its version (torch's compiler comes with it), and
    transformers only to read its version for a Kimi-VL patch: the launcher reads verl's from the package's
    metadata and decorates with the Kimi-VL patch on first call, so a dry run loads neither."""
    import subprocess

    script = "frozenlake/main.py"
    argv = [script, "--dry-run", "--gpus", "1", "--data-dir", str(frozenlake_data), "--checkpoint-dir", str(tmp_path)]
    probe = (f"import atexit, runpy, sys\nsys.argv = {argv!r}\n"  # the script ends the process: atexit reports
             f"atexit.register(lambda: print('loaded:', [m for m in ('verl', 'transformers') if m in sys.modules]))\n"
             f"runpy.run_path({script!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "dry run: the config is valid" in result.stdout, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "loaded: []"
    not_checked = next(line for line in result.stdout.splitlines() if line.startswith("not checked by a dry run: "))
    assert "the GPUs' memory" in not_checked and "that vLLM starts" in not_checked


def test_verls_version_is_read_as_trinity_reads_it_and_a_moved_check_fails():
    import inspect

    from conftest import as_module
    from rftkit.patches.apply import PatchTargetMoved

    import trinity.trainer.trainer as trainer_module

    from rftkit import check_patches

    original = inspect.unwrap(trainer_module.is_verl_legacy)  # Trinity's, patched here or not
    copy = as_module(trainer_module.__name__, is_verl_legacy=original)
    check_patches.verl_version_from_metadata(copy)
    assert copy.is_verl_legacy is not original and copy.is_verl_legacy() == original() is False

    def moved():
        return False

    with pytest.raises(PatchTargetMoved, match="'checks.verl_version'.*is_verl_legacy no longer has `import verl`"):
        check_patches.verl_version_from_metadata(as_module(trainer_module.__name__, is_verl_legacy=moved))


def test_the_kimi_vl_patch_decorates_on_first_call_as_trinity_would_and_a_moved_one_fails():
    from conftest import as_module
    from rftkit import check_patches
    from rftkit.patches.apply import PatchTargetMoved

    decorated = []

    def decorator(func):  # Trinity-RFT 0.6.0's reads transformers' version here, at decoration
        import transformers  # noqa: F401 - what the patch checks for

        decorated.append(func.__name__)
        return lambda *args: ("patched", func(*args))

    package = as_module("trinity.common.patch", kimi_vl_monkey_patch_decorator=decorator)
    check_patches.kimi_patch_on_first_call(package)

    @package.kimi_vl_monkey_patch_decorator
    def params(model_path):
        return model_path

    assert decorated == [], "decorated at definition"
    assert params("m") == ("patched", "m") and params("n") == ("patched", "n")
    assert decorated == ["params"] and params.__name__ == "params"

    def moved(func):
        return func

    with pytest.raises(PatchTargetMoved, match="kimi_vl_monkey_patch_decorator no longer has `import transformers`"):
        check_patches.kimi_patch_on_first_call(as_module("trinity.common.patch", kimi_vl_monkey_patch_decorator=moved))


def test_the_launch_turns_garbage_collection_back_on_when_it_refuses():
    import gc

    from rftkit.inputs import InputError
    from rftkit.launch import launch

    args = argparse.Namespace(set_values=[("buffer.batch_sise", "4")])
    with pytest.raises(InputError, match="--set buffer.batch_sise"):
        launch(args, "frozenlake.workflow:run_frozen_lake")
    assert gc.isenabled()


def test_exit_now_flushes_runs_atexit_and_keeps_the_code():
    import subprocess

    code = ("import atexit\nfrom rftkit.cli import exit_now\n"
            "atexit.register(lambda: print('handler ran'))\nprint('output', end='')\nexit_now(3)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stdout == "outputhandler ran\n"


def test_typed_paths_are_the_current_folders_and_defaults_the_checkouts(frozenlake_data, tmp_path):
    """Run from another folder: a relative --data-dir and --checkpoint-dir are taken from there; the config and
    the checkpoint root it names (./checkpoints) from the checkout. --help says so."""
    import shutil
    import subprocess

    from rftkit.example import PATHS_RULE

    shutil.copytree(frozenlake_data, tmp_path / "fl")
    main = str(REPO / "frozenlake" / "main.py")
    typed = subprocess.run([sys.executable, main, "--dry-run", "--gpus", "2", "--data-dir", "fl",
                            "--checkpoint-dir", "ck"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert typed.returncode == 0, typed.stderr[-2000:]
    assert f"{tmp_path / 'fl'} [train]" in typed.stdout
    assert f"checkpoints     {tmp_path / 'ck'}/" in typed.stdout
    default = subprocess.run([sys.executable, main, "--dry-run", "--gpus", "2", "--data-dir", "fl"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert default.returncode == 0, default.stderr[-2000:]
    assert f"checkpoints     {REPO / 'checkpoints'}/" in default.stdout
    assert not (tmp_path / "checkpoints").exists()
    for script in ("frozenlake/main.py", "math_bots/main.py", "scripts/evaluate.py", "scripts/get_frozenlake_data.py",
                   "scripts/prepare_math_data.py"):
        shown = subprocess.run([sys.executable, str(REPO / script), "--help"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=120).stdout
        assert " ".join(PATHS_RULE.split()) in " ".join(shown.split()), script
