"""The GPU smoke harness, beside the tests that run it (tests/test_gpu_smoke.py, test_resume_smoke.py,
test_engine_check.py). Each runs on a machine with CUDA GPUs, from the repo's root, as a module:

- `smoke.py` (`python -m tests.gpu.smoke`): every shipped config trains 2 steps, checked;
- `resume_smoke.py` (`python -m tests.gpu.resume_smoke`): a BOTS run killed and resumed;
- `engine_check.py`: the rollout engines watched during a run, and their weights checked after;
- `engine_check_margin.py` (`python -m tests.gpu.engine_check_margin`, on CPU): the calibration of
  that check, how far apart a synced and a stale engine are on the smoke's model;
- `faults/`: a Trinity plugin that makes a run fail on purpose (`--fault`).

The tiny model and the sample data they train on are runkit's (the experiments use them too).
"""
