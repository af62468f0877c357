"""The GPU smoke harness, run on a machine with CUDA GPUs: `smoke.py` (every config trains 2 steps,
checked), `resume_smoke.py` (a BOTS run killed and resumed), `engine_check.py` (the rollout engines
watched during a run) and `faults/` (a Trinity plugin that makes a run fail on purpose). The
measurements are in experiments/.
"""
