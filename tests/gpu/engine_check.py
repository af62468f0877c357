"""Did every rollout engine work in every step, and hold the trainer's weights after each sync?

The GPU smoke test (tests/gpu/smoke.py) asks both of every run; they matter most where the launcher
plans several engines (4 GPUs and up), which a one-engine run cannot show.

* Rollouts: Trinity's scheduler binds runner i to engine i % engine_num
  (trinity/explorer/scheduler.py) and every runner logs "Starting task: step=N" to
  explorer_runner_<i>.log, so the runner logs tell which engines worked in which explore step.
* Weights: while the run goes on, this module run as a program asks every engine through Ray which
  policy version it holds and, at each version it reaches, the log-probabilities it gives a
  fixed token sequence (vLLMRolloutModel.get_model_version and .logprobs). Afterwards
  `weight_checks` computes the same with transformers from the trainer's checkpoint of that
  version (version 0: the starting model) and compares. For the comparison to tell anything,
  the trainer's updates must move the weights (the smoke's random model earns no reward, so
  the smoke adds an entropy term and a large learning rate); a version whose weights moved the
  log-probabilities too little to tell fails as such.

    python -m tests.gpu.engine_check --out probes.jsonl   # beside a launch, from the repo's root, until it ends
    with engine_check.watching(probes, log): ...          # the same, for the time the block runs
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from rftkit.cli import ArgumentParser

from rftkit.example import REPO  # the checkout's root
PROBE_TOKENS = list(range(1000, 1064))  # fixed ids inside any real vocabulary: only the weights vary
TEMPERATURE = 1.0  # the engines' log-probabilities unscaled, as transformers gives them
ENGINE_ACTOR = re.compile(r"_rollout_model_(\d+)_0$")  # Trinity's allocator: <explorer>_rollout_model_<engine>_<node>
RUNNER_LOG = re.compile(r"explorer_runner_(\d+)\.log$")
TASK_STARTED = re.compile(r"Starting task: step=(\d+),")  # eval batches read "step=<N>/<taskset>,"
# Mean |difference| per token, in nats. On the smoke's model bf16 against fp32 differs by 0.0014, and
# one update at the smoke's learning rate moves it by 0.35 (tests/gpu/engine_check_margin.py, CPU).
# On one H200 a vLLM engine and transformers differed by 0.0010 to 0.0014 (docs/gpu.md, GPU smoke test).
TOLERANCE = 0.03
MIN_MOVE = 0.1


def engine_steps(log_dir: Path, engines: int) -> dict[int, set[int]]:
    """{engine: the explore steps in which a runner bound to it started a task}, from a run's log folder."""
    steps: dict[int, set[int]] = {engine: set() for engine in range(engines)}
    for path in log_dir.glob("explorer_runner_*.log"):
        runner = int(RUNNER_LOG.search(path.name).group(1))
        steps[runner % engines].update(int(m.group(1)) for m in TASK_STARTED.finditer(path.read_text(errors="replace")))
    return steps


def rollout_check(log_dir: Path, engines: int) -> tuple[bool, str]:
    """Every engine started tasks in every explore step that any engine did (and there was one)."""
    steps = engine_steps(log_dir, engines)
    every = set().union(*steps.values())
    idle = {engine: sorted(every - worked) for engine, worked in steps.items() if every - worked}
    detail = "; ".join(f"engine {engine}: steps {sorted(worked)}" for engine, worked in steps.items())
    if idle:
        detail += "; idle: " + ", ".join(f"engine {engine} in steps {missed}" for engine, missed in idle.items())
    return bool(every) and not idle, detail


def find_engines() -> dict[int, object]:
    """{engine: Ray actor handle} of the rollout engines in the cluster this process is connected to."""
    import ray

    found = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        match = ENGINE_ACTOR.search(actor["name"])
        if match:
            found[int(match.group(1))] = ray.get_actor(actor["name"], namespace=actor["namespace"])
    return found


def watch(out: Path, interval: float) -> None:
    """Append {engine, version, time, logprobs} to `out` for each version each engine reaches; runs until killed.

    Waits for a Ray cluster and for its engines to be ready; an engine that is still starting
    answers with an error, which is printed and asked again."""
    import ray

    seen: set[tuple[int, int]] = set()
    while True:
        try:
            if not ray.is_initialized():
                ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
            for engine, handle in sorted(find_engines().items()):
                version = ray.get(handle.get_model_version.remote(), timeout=60)
                if (engine, version) in seen:
                    continue
                # by keyword: a handle whose class this process cannot import takes no positional arguments
                logprobs = ray.get(handle.logprobs.remote(token_ids=PROBE_TOKENS, temperature=TEMPERATURE), timeout=300)
                if ray.get(handle.get_model_version.remote(), timeout=60) != version:
                    continue  # a sync ran meanwhile: ask again at the new version
                seen.add((engine, version))
                with out.open("a") as f:
                    f.write(json.dumps({"engine": engine, "version": version, "time": time.time(),
                                        "logprobs": [float(x) for x in logprobs]}) + "\n")
                print(f"probe: engine {engine} at version {version}", flush=True)
        except ConnectionError:
            pass  # no cluster yet
        except Exception as exc:  # an engine still starting, or the run ending: ask again
            print(f"probe: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr, flush=True)
        time.sleep(interval)


@contextlib.contextmanager
def watching(out: Path, log: Path, interval: float = 2.0):
    """`watch` into `out` (emptied first), in a process of its own with its own Ray connection, for the
    time the block runs; its output goes to `log`. Yields the process."""
    out.unlink(missing_ok=True)
    with open(log, "w") as output:
        probe = subprocess.Popen([sys.executable, "-m", "tests.gpu.engine_check", "--out", str(out.resolve()),
                                  "--interval", str(interval)], cwd=REPO, stdout=output, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            yield probe
        finally:
            probe.terminate()
            probe.wait()


def reference_logprobs(model_dir: Path, dtype: str = "bfloat16") -> list[float]:
    """log p(token | the tokens before it) for PROBE_TOKENS[1:], by transformers from an HF folder,
    in bf16 as the engines run: what vLLMRolloutModel.logprobs returns for the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device)
    ids = torch.tensor([PROBE_TOKENS], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / TEMPERATURE
    return torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0].tolist()


def mean_gap(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def weight_checks(probes: list[dict], engines: int, weights_of: Callable[[int], Path | None]
                  ) -> list[tuple[str, bool, str]]:
    """(name, ok, detail) for every probe, and one saying every engine got a sync.

    `weights_of(version)` is the HF folder of the trainer's weights at that version (0: the
    starting model), or None where none was saved; probes of such versions are reported, not judged."""
    references: dict[int, list[float] | None] = {}

    def reference(version: int) -> list[float] | None:
        if version not in references:
            folder = weights_of(version)
            references[version] = reference_logprobs(folder) if folder is not None else None
        return references[version]

    results = []
    for probe in sorted(probes, key=lambda p: (p["version"], p["engine"])):
        engine, version = probe["engine"], probe["version"]
        name = f"engine {engine} holds the trainer's version-{version} weights"
        try:
            expected, start = reference(version), reference(0)
        except Exception as exc:  # an unreadable checkpoint fails this check; the others still run
            results.append((name, False, f"the trainer's weights would not load: {type(exc).__name__}: {exc}"))
            continue
        if expected is None:
            results.append((name, True, "no checkpoint of this version to compare with (not judged)"))
            continue
        gap = mean_gap(probe["logprobs"], expected)
        detail = f"mean |engine - trainer| {gap:.4f} nats (tolerance {TOLERANCE})"
        ok = gap <= TOLERANCE
        if version > 0:
            moved = mean_gap(expected, start)
            detail += f"; the updates moved them {moved:.3f} from version 0"
            if moved < MIN_MOVE:
                ok, detail = False, detail + f", under {MIN_MOVE}: too little to tell a synced engine from a stale one"
        results.append((name, ok, detail))
    synced = {p["engine"] for p in probes if p["version"] > 0}
    never = sorted(set(range(engines)) - synced)
    results.append(("every engine received a weight sync", not never,
                    f"versions seen: {sorted({(p['engine'], p['version']) for p in probes})}"
                    + (f"; never synced: engines {never}" if never else "")))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m tests.gpu.engine_check", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="JSON lines to append the probes to")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between rounds (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    watch(args.out, args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
