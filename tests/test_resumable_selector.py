"""difficulty_based_resumable: the same choices as Trinity's difficulty_based, and posteriors that survive a restart."""

import json
import os
import subprocess
import sys

import datasets
import numpy as np
import pytest
import torch
from trinity.buffer.reader.file_reader import _HFBatchReader
from trinity.buffer.selector import SELECTORS
from trinity.common.config import DataSelectorConfig

from conftest import REPO
from rftkit import trinity_plugins
from rftkit.trinity_config import PLUGIN_DIRS_ENV, use_plugins
from rftkit.trinity_plugins.resumable_bots import NAME, ResumableDifficultyBasedSelector

KWARGS = {"m": 8, "lamb": 0.1, "rho": 0.1, "target_reward": 0.8, "tau": 0, "do_sample": True}
FEATURES = ["weak_pass_rate", "strong_pass_rate"]


def make_selector(name, n=200, kwargs=KWARGS):
    rng = np.random.default_rng(1)
    weak = rng.uniform(0, 0.7, n)
    source = _HFBatchReader(datasets.Dataset.from_dict({"weak_pass_rate": weak,
                                                        "strong_pass_rate": np.clip(weak + 0.3, 0, 1)}),
                            name="toy", default_batch_size=16, total_epochs=1, enable_progress_bar=False)
    return SELECTORS.get(name)(source, DataSelectorConfig(selector_type=name, seed=42, feature_keys=FEATURES,
                                                          kwargs=dict(kwargs)))


def step(selector, batch=16):
    """Select a batch and feed back pass rates that depend only on the chosen indices."""
    indices = selector.get_indices(batch)
    values = [((i * 7919) % 9) / 8 for i in indices.tolist()]
    selector.feedback(indices=indices.tolist(), values=values)
    return indices


@pytest.mark.parametrize("kwargs", [KWARGS, {**KWARGS, "tau": 0.5},
                                    {**KWARGS, "do_sample": False, "adaptive_rho": True}])
def test_choices_match_the_builtin_selector(kwargs):
    builtin, resumable = make_selector("difficulty_based", kwargs=kwargs), make_selector(NAME, kwargs=kwargs)
    assert type(resumable) is ResumableDifficultyBasedSelector
    for _ in range(12):
        assert torch.equal(step(builtin), step(resumable))
    assert np.array_equal(builtin.diff_estimator.alphas, resumable.diff_estimator.alphas)


def test_state_round_trip_through_json_resumes_exactly():
    running = make_selector(NAME)
    for _ in range(5):
        step(running)
    state = json.loads(json.dumps(running.state_dict()))  # Trinity saves explorer state as JSON
    resumed = make_selector(NAME)
    resumed.load_state_dict(state)
    for attribute in ("alphas", "betas"):
        assert np.array_equal(getattr(resumed.diff_estimator, attribute), getattr(running.diff_estimator, attribute))
    assert resumed.diff_estimator.cap_coef == running.diff_estimator.cap_coef
    assert resumed.current_index == running.current_index == 80
    for _ in range(5):
        assert torch.equal(step(resumed), step(running))


def test_the_builtin_selector_forgets_its_posteriors():
    """Why the resumable one exists: the built-in state is only the step counter."""
    running = make_selector("difficulty_based")
    for _ in range(5):
        step(running)
    assert running.state_dict() == {"current_index": 80}
    resumed = make_selector("difficulty_based")
    resumed.load_state_dict(running.state_dict())
    assert np.all(resumed.diff_estimator.alphas == 1.0)
    assert not np.array_equal(resumed.diff_estimator.alphas, running.diff_estimator.alphas)


def test_old_checkpoints_load_and_mismatched_ones_are_refused():
    selector = make_selector(NAME)
    selector.load_state_dict({"current_index": 32})  # a checkpoint of the built-in selector
    assert selector.current_index == 32 and np.all(selector.diff_estimator.alphas == 1.0)
    bigger = make_selector(NAME, n=300)
    with pytest.raises(ValueError, match="300 tasks"):
        selector.load_state_dict(bigger.state_dict())


def test_a_ray_worker_gets_it_where_trinitys_actors_load_plugins_and_nothing_is_copied(tmp_path):
    """What an Explorer actor does at start, in a worker with the launch's setup hook: load_plugins(), then
    build selectors. The selector is there, and Trinity's package folder has no copy of it."""
    import trinity.utils.plugin_loader

    installed = os.path.join(os.path.dirname(os.path.dirname(trinity.utils.plugin_loader.__file__)), "plugins")
    before = sorted(os.listdir(installed))
    env = {key: value for key, value in os.environ.items() if key != PLUGIN_DIRS_ENV}
    code = ("import rftkit.workers; rftkit.workers.setup(); "
            "from trinity.utils.plugin_loader import load_plugins; load_plugins(); "
            "from trinity.buffer.selector import SELECTORS; "
            f"print(SELECTORS.get({NAME!r}).__module__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                            cwd=tmp_path)
    assert result.stdout.strip().splitlines()[-1] == "rftkit.trinity_plugins.resumable_bots"
    assert sorted(os.listdir(installed)) == before


def test_the_launcher_loads_its_plugins_and_a_users_plugin_dirs(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("LOADED = True\n")
    monkeypatch.setenv(PLUGIN_DIRS_ENV, str(tmp_path))
    monkeypatch.setattr("trinity.utils.plugin_loader.shutil.copy2", lambda *args: None)  # Trinity's copy, not ours
    use_plugins()
    use_plugins()  # idempotent
    assert sys.modules["trinity.plugins.mine"].LOADED
    assert SELECTORS.get(NAME) is ResumableDifficultyBasedSelector
    assert os.environ[PLUGIN_DIRS_ENV] == str(tmp_path), "the user's folders stay as they were"


def test_more_plugin_modules_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(trinity_plugins.EXTRA_ENV, " tests.gpu.faults.smoke_faults ,")
    assert trinity_plugins.modules() == [*trinity_plugins.MODULES, "tests.gpu.faults.smoke_faults"]


def test_stale_copies_of_this_projects_plugins_are_removed_and_others_kept(tmp_path):
    loader = tmp_path / "trinity" / "utils" / "plugin_loader.py"
    plugins = tmp_path / "trinity" / "plugins"
    for folder in (loader.parent, plugins):
        folder.mkdir(parents=True)
    (plugins / "resumable_bots.py").write_text((REPO / "rftkit/trinity_plugins/resumable_bots.py").read_text())
    (plugins / "smoke_faults.py").write_text("a user's own plugin of the same name\n")
    import types

    removed = trinity_plugins.remove_stale_copies(types.SimpleNamespace(__file__=str(loader)))
    assert removed == [str(plugins / "resumable_bots.py")]
    assert sorted(p.name for p in plugins.iterdir()) == ["smoke_faults.py"]


def test_the_patch_stops_when_trinity_no_longer_loads_plugins_so():
    from conftest import as_module
    from rftkit.patches.apply import PatchTargetMoved

    with pytest.raises(PatchTargetMoved, match="'plugins.after_trinitys'.*load_plugins is missing.*trinity-rft 0.6.0"):
        trinity_plugins.after_trinity_loads_plugins(as_module("trinity.utils.plugin_loader"))


def test_the_selector_prints_what_choosing_costs_and_the_bots_report_reads_it(tmp_path, capsys):
    from experiments.bots_comparison import report
    from rftkit.reports.tensorboard import Point
    from rftkit.trinity_plugins.digest import COST

    selector = make_selector(NAME)
    for _ in range(3):
        step(selector)
    printed = capsys.readouterr().out
    assert printed.count(COST) == 3 and printed.count("ms taking the feedback of 16 tasks") == 3  # a line a step
    # as the launch's log holds them: each line behind Ray's prefix for the explorer actor
    log = tmp_path / "train.log"
    log.write_text("".join(f"(Explorer pid=7) {line}\n" for line in printed.splitlines()))
    points = {report.ACCURACY: [Point(1, 0.1, 1000.0), Point(2, 0.1, 1012.0), Point(3, 0.2, 1020.0)]}
    cost = report.selector_cost(log, points)
    assert cost["steps"] == 3 and cost["seconds per step"] == pytest.approx(10.0)
    assert 0 < cost["choosing ms"] < 1000 and 0 < cost["feedback ms"] < 1000
    assert cost["share of a step"] == pytest.approx(cost["ms per step"] / 10_000)
    assert report.selector_cost(tmp_path / "random.log", points) is None  # no log, or random's: no lines
