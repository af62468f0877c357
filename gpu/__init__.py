"""GPU-only tooling, run on a machine with CUDA GPUs.

The smoke harness: `smoke.py` (every config trains 2 steps, checked), `resume_smoke.py` (a BOTS run
killed and resumed), `engine_check.py` (the rollout engines watched during a run), `tiny_model.py`
and `faults/` (a Trinity plugin that makes a run fail on purpose).
The measurements, each with a page under docs/results: `frozenlake_learning.py`, `step_cost.py`,
`trainer_speed.py`, `math_pass_rates.py`, `bots_comparison.py`, and `qwen_coder_gguf.sh` (their model).
"""
