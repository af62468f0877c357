"""`difficulty_based_resumable`: Trinity's BOTS selector, with its posteriors kept across a restart.

Trinity 0.6's `difficulty_based` selector checkpoints only its step counter, so
a resumed run starts again from the prior: every Beta posterior and the fitted
capability coefficient are lost. This subclass selects exactly as the built-in
one does (it adds no logic to selection or feedback) and also saves and
restores alpha, beta, the capability coefficient and rho (which `adaptive_rho`
may have halved). After each step's feedback it prints how long choosing that
step's tasks and taking their feedback took: a run's log shows what selection costs.

This file is a Trinity plugin, imported by name in the launching process and in
every Ray worker of a run (rftkit.trinity_plugins).
"""

from __future__ import annotations

import time

import numpy as np
from trinity.buffer.selector import SELECTORS
from trinity.buffer.selector.selector import DifficultyBasedSelector

from rftkit.trinity_plugins.digest import COST, NAME, RESTORED, posterior_digest


class ResumableDifficultyBasedSelector(DifficultyBasedSelector):
    """`difficulty_based`, plus the estimator's state in `state_dict` (JSON-friendly lists)."""

    def get_indices(self, batch_size: int, return_extra_info: bool = False):
        started = time.perf_counter()
        chosen = super().get_indices(batch_size, return_extra_info)
        self._choosing_ms = 1000 * (time.perf_counter() - started)  # printed with the step's feedback: one line
        return chosen

    def feedback(self, indices, values) -> None:
        started = time.perf_counter()
        super().feedback(indices, values)
        print(f"{COST} {getattr(self, '_choosing_ms', 0.0):.3f} ms choosing and "
              f"{1000 * (time.perf_counter() - started):.3f} ms taking the feedback of {len(indices)} tasks",
              flush=True)

    def state_dict(self) -> dict:
        estimator = self.diff_estimator
        return {
            **super().state_dict(),
            "alphas": estimator.alphas.tolist(),
            "betas": estimator.betas.tolist(),
            "cap_coef": None if estimator.cap_coef is None else float(estimator.cap_coef),
            "rho": float(estimator.rho),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if "alphas" not in state_dict:  # a fresh run, or a checkpoint of the built-in selector
            return
        estimator = self.diff_estimator
        alphas, betas = np.asarray(state_dict["alphas"], float), np.asarray(state_dict["betas"], float)
        if alphas.shape != (estimator.n,) or betas.shape != (estimator.n,):
            raise ValueError(f"{NAME}: the checkpoint holds posteriors for {alphas.size} tasks but the "
                             f"taskset has {estimator.n}; resume with the same data")
        estimator.set(alphas, betas)
        estimator.cap_coef = state_dict.get("cap_coef")
        estimator.rho = state_dict.get("rho", estimator.rho)
        print(f"{RESTORED} the posteriors of {estimator.n} tasks at index {self.current_index} "
              f"(digest {posterior_digest(alphas, betas)})", flush=True)


# force: the launcher imports this module and Trinity's plugin loader may load the same file again.
SELECTORS.register_module(NAME, ResumableDifficultyBasedSelector, force=True)
