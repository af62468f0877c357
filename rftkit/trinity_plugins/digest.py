"""What a run's logs say of the resumable BOTS selector, readable without Trinity or torch: the resume line's
start, the posteriors' fingerprint and the start of its cost lines (rftkit.trinity_plugins.resumable_bots prints
them)."""

from __future__ import annotations

import hashlib

import numpy as np

NAME = "difficulty_based_resumable"
RESTORED = f"{NAME}: restored"  # starts the line a resumed explorer prints (a run's logs show the resume)
COST = f"{NAME}: took"  # starts the line the selector prints after each step's feedback, with its costs


def posterior_digest(alphas, betas) -> str:
    """A short fingerprint of the posteriors, to compare a resumed selector's with the saved ones."""
    data = np.concatenate([np.asarray(alphas, float), np.asarray(betas, float)])
    return hashlib.sha256(data.tobytes()).hexdigest()[:16]
