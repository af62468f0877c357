"""`gsm8k_judge`: score a \\boxed{} answer against a GSM8K-style ground truth ("... #### x")."""

from __future__ import annotations

from agentscope.message import Msg
from agentscope.tuner import JudgeOutput
from trinity.common.rewards.eval_utils import (
    last_boxed_only_string,
    parse_with_timeout,
    verify_with_timeout,
)
from trinity.common.rewards.math_reward import MathBoxedRewardFn

from math_bots.data import ground_truth

_reward_fn = MathBoxedRewardFn()


def equivalent(boxed: str, truth: str) -> bool:
    """math_verify's equivalence: 1/2 = 0.5, 18,000 = 18000, 2√2 = √8; False if it cannot tell."""
    try:
        return bool(verify_with_timeout(parse_with_timeout(f"\\boxed{{{truth}}}"), parse_with_timeout(boxed)))
    except Exception:  # noqa: BLE001 - an unparsable answer is simply not equivalent
        return False


def score(text: str, truth: str) -> dict[str, float]:
    """accuracy: the last \\boxed{} answer equals the truth; format: there is a \\boxed{} answer.

    Trinity's MathBoxedRewardFn decides first (string normalisation); math_verify
    then catches equivalent forms it misses.
    """
    boxed = last_boxed_only_string(text)
    accuracy = _reward_fn(response=text, truth=truth)["accuracy"]
    if accuracy == 0.0 and boxed is not None and equivalent(boxed, truth):
        accuracy = 1.0
    return {"accuracy": float(accuracy), "format": float(boxed is not None)}


async def gsm8k_judge(
    task: dict,
    response: Msg,
    auxiliary_models: dict | None = None,
) -> JudgeOutput:
    """Reward 1.0 for a correct final answer, else 0.0."""
    text = response.get_text_content() if isinstance(response, Msg) else str(response or "")
    metrics = score(text or "", ground_truth(task["answer"]))
    return JudgeOutput(reward=metrics["accuracy"], metrics=metrics)
