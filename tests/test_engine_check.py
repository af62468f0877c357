"""tests/gpu/engine_check.py: which engines worked in which step, and whether each holds the trainer's weights.

The probe runs as the smoke runs it, a separate process watching a real (CPU) Ray cluster. The
engines there are fixtures standing for Trinity's vLLMRolloutModel: named as Trinity's allocator
names them, reporting a policy version and the log-probabilities of the weights they hold,
computed by transformers from small random-weight models (conftest's `versions`).
"""

import subprocess
import sys

from tests.gpu import engine_check

from conftest import REPO


def runner_logs(folder, started):
    """explorer_runner_<i>.log files as Trinity's runners write them: {runner: [steps it started a task in]}."""
    folder.mkdir(parents=True, exist_ok=True)
    for runner, steps in started.items():
        lines = [f"INFO 12-01 04:01:06 [workflow_runner.py:88] WorkflowRunner [explorer_runner_{runner}] initialized:"]
        lines += [f"INFO 12-01 04:01:{10 + step:02d} [workflow_runner.py:388] Starting task: step={step}, "
                  f"model_version={step - 1}, repeat_times=1, run_id_base=0" for step in steps]
        if runner == 0:  # an evaluation task, which is not a rollout of an explore step
            lines.append("INFO 12-01 04:01:09 [workflow_runner.py:388] Starting task: step=0/frozenlake_test, "
                         "model_version=0, repeat_times=1, run_id_base=0")
        (folder / f"explorer_runner_{runner}.log").write_text("\n".join(lines) + "\n")
    return folder


def test_engines_are_told_apart_by_their_runners(tmp_path):
    # runner i works for engine i % 2: runners 1 and 3 belong to engine 1, which did nothing in step 2
    logs = runner_logs(tmp_path / "log", {0: [1, 2], 1: [1], 2: [2], 3: [1]})
    assert engine_check.engine_steps(logs, 2) == {0: {1, 2}, 1: {1}}
    ok, detail = engine_check.rollout_check(logs, 2)
    assert not ok and "engine 1 in steps [2]" in detail
    assert engine_check.rollout_check(runner_logs(tmp_path / "busy", {0: [1, 2], 1: [2, 1]}), 2)[0]
    assert engine_check.rollout_check(logs, 1)[0]  # one engine: every runner is its own
    assert not engine_check.rollout_check(runner_logs(tmp_path / "none", {0: [], 1: []}), 2)[0]


def test_the_reference_is_what_the_weights_give_and_tells_versions_apart(versions):
    v0, v1 = (engine_check.reference_logprobs(versions[version]) for version in (0, 1))
    assert len(v0) == len(engine_check.PROBE_TOKENS) - 1 and all(x < 0 for x in v0)
    assert engine_check.reference_logprobs(versions[0]) == v0  # deterministic
    assert engine_check.mean_gap(v0, v1) > engine_check.MIN_MOVE


def probe(engine, version, folder):
    return {"engine": engine, "version": version, "logprobs": engine_check.reference_logprobs(folder)}


def test_a_stale_engine_fails_and_an_update_too_small_to_tell_is_said_to_be_so(versions):
    synced = [probe(0, 0, versions[0]), probe(1, 0, versions[0]), probe(0, 1, versions[1]), probe(1, 1, versions[1])]
    assert all(ok for _, ok, _ in engine_check.weight_checks(synced, 2, versions.get))

    stale = synced[:3] + [probe(1, 1, versions[0])]  # engine 1 says version 1 but kept version 0's weights
    failed = [name for name, ok, _ in engine_check.weight_checks(stale, 2, versions.get) if not ok]
    assert failed == ["engine 1 holds the trainer's version-1 weights"]

    barely = {0: versions[0], 1: versions["barely"]}  # engine 1 was never synced, either
    results = engine_check.weight_checks(synced[:2] + [probe(0, 1, barely[1])], 2, barely.get)
    failed = {name: detail for name, ok, detail in results if not ok}
    assert list(failed) == ["engine 0 holds the trainer's version-1 weights", "every engine received a weight sync"]
    verdict = failed["engine 0 holds the trainer's version-1 weights"]
    assert "too little to tell a synced engine from a stale one" in verdict
    assert failed["every engine received a weight sync"].endswith("never synced: engines [1]")


def test_versions_without_a_checkpoint_are_reported_not_judged(versions):
    results = engine_check.weight_checks([probe(0, 2, versions[1])], 1, {0: versions[0]}.get)
    assert results[0] == ("engine 0 holds the trainer's version-2 weights", True,
                          "no checkpoint of this version to compare with (not judged)")


WATCH_TWO_ENGINES = """
import sys, time
from pathlib import Path
import ray, torch
from tests.gpu import engine_check

v0, v1, out = sys.argv[1:4]

class FixtureEngine:  # stands for vLLMRolloutModel: a version, and the log-probabilities of its weights
    def __init__(self, folder):
        self.version, self.folder = 0, folder
    def get_model_version(self):
        return self.version
    def logprobs(self, token_ids, temperature=None):
        assert token_ids == engine_check.PROBE_TOKENS and temperature == 1.0
        return torch.tensor(engine_check.reference_logprobs(Path(self.folder)))
    def sync(self, version, folder):
        self.version, self.folder = version, folder

def wait_for(probe, lines):
    deadline = time.time() + 120
    while not (Path(out).is_file() and len(Path(out).read_text().splitlines()) >= lines):
        if time.time() > deadline or probe.poll() is not None:
            raise SystemExit(f"no {lines} probes; probe exit {probe.poll()}")
        time.sleep(0.5)

ray.init(num_cpus=4, namespace="engine-check-test", logging_level="ERROR")
try:
    with engine_check.watching(Path(out), Path(out).with_suffix(".log"), interval=0.5) as probe:
        time.sleep(2)  # the probe is up before the engines, as in a launch
        engines = [ray.remote(FixtureEngine).options(name=f"explorer_rollout_model_{i}_0").remote(v0) for i in (0, 1)]
        wait_for(probe, 2)
        ray.get([engines[0].sync.remote(1, v1), engines[1].sync.remote(1, v0)])  # engine 1's sync kept old weights
        wait_for(probe, 4)
finally:
    ray.shutdown()
"""


def test_the_probe_watches_every_engine_through_ray_and_a_stale_one_is_caught(versions, tmp_path):
    import json

    out = tmp_path / "probes.jsonl"
    result = subprocess.run([sys.executable, "-c", WATCH_TWO_ENGINES, str(versions[0]), str(versions[1]), str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    probes = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((p["engine"], p["version"]) for p in probes) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    verdicts = {name: ok for name, ok, _ in engine_check.weight_checks(probes, 2, versions.get)}
    assert verdicts == {"engine 0 holds the trainer's version-0 weights": True,
                        "engine 1 holds the trainer's version-0 weights": True,
                        "engine 0 holds the trainer's version-1 weights": True,
                        "engine 1 holds the trainer's version-1 weights": False,
                        "every engine received a weight sync": True}
