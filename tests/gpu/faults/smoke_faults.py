"""Faults on purpose, for `python -m tests.gpu.smoke --fault`: prove that a run whose Explorer or Trainer dies ends.

A Trinity plugin (load it with RFTKIT_PLUGINS=tests.gpu.faults.smoke_faults); it registers:

* `fault_explorer`, an experience operator that raises on the first batch it sees.
  It runs in the Explorer's experience pipeline, so the Explorer's main loop dies at
  step 1 and, in Trinity 0.6 alone, the Trainer then waits for experiences that never come.
  Use: data_processor.experience_pipeline.operators=[{name: fault_explorer}]
* `fault_trainer`, a sample strategy that raises when the Trainer reads step 1's batch.
  The Trainer's main loop dies at step 1 and, in Trinity 0.6 alone, the run ends
  with a status that says success. Use: algorithm.sample_strategy=fault_trainer

Both errors say INJECTED_FAULT so that the smoke can find them in the launcher's message.
"""

from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY
from trinity.algorithm.sample_strategy.sample_strategy import DefaultSampleStrategy
from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperatorV1

INJECTED_FAULT = "injected fault (tests/gpu/faults/smoke_faults.py)"


class FaultExplorer(ExperienceOperatorV1):
    async def process(self, exps):
        raise RuntimeError(f"explorer: {INJECTED_FAULT}")


class FaultTrainer(DefaultSampleStrategy):
    async def sample(self, step, **kwargs):
        raise RuntimeError(f"trainer at step {step}: {INJECTED_FAULT}")


EXPERIENCE_OPERATORS.register_module("fault_explorer", FaultExplorer, force=True)
SAMPLE_STRATEGY.register_module("fault_trainer", FaultTrainer, force=True)
