"""`gsm8k_judge`: score a \\boxed{} answer against a GSM8K-style ground truth ("... #### x")."""

from __future__ import annotations

import re

from agentscope.message import Msg
from agentscope.tuner import JudgeOutput
from trinity.common.rewards.eval_utils import (
    last_boxed_only_string,
    parse_with_timeout,
    remove_boxed,
    verify_with_timeout,
)
from trinity.common.rewards.math_reward import MathBoxedRewardFn

from math_bots.data import ground_truth

_reward_fn = MathBoxedRewardFn()

# A number, its thousands in groups of three after a comma or a space ("18,000", "18 000"),
# then either a percent sign or words, each separated from the number by a space
# ("50 %", "50 dollars"); words stuck to the number ("5k", "5x") are not units.
_NUMBER_AND_UNIT = re.compile(
    r"\$?\s*(?P<number>-?(?:\d{1,3}(?:[, ]\d{3})+|\d+)(?:\.\d+)?)"
    r"(?:\s*%|(?P<words>(?:\s+[A-Za-z]+)+))?\.?"
)
# TeX's spacing commands, each read as a space: the thin, medium and thick spaces and their names, the
# negative thin space, the control space, \quad and \qquad, \enspace, \space, \hspace{..}, \hskip and \kern
# with their lengths, and the tie ~. Letters after a named command would make it another command.
_TEX_SPACE = re.compile(
    r"\\(?:[,:;! ]|(?:quad|qquad|enspace|thinspace|medspace|thickspace|negthinspace|negmedspace|negthickspace"
    r"|space)(?![A-Za-z])|hspace\*?\{[^{}]*\}|(?:hskip|kern|mkern|mskip)\s*-?[\d.]+\s*(?:pt|em|ex|mu|px)?)|~"
)
# Words that change the number before them ("5 hundred", "2 dozen", "3 and a half", "4 fifths",
# "5 squared"); an answer ending in one of these is not reduced to its number.
_VALUE_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty
    ninety hundred thousand million billion trillion bn mn mil dozen score gross grand half halves
    third fourth quarter fifth sixth seventh eighth ninth tenth hundredth thousandth millionth
    squared cubed factorial pi""".split()
)


def equivalent(boxed: str, truth: str) -> bool:
    """math_verify's equivalence: 1/2 = 0.5, 18,000 = 18000, 2√2 = √8; False if it cannot tell."""
    try:
        return bool(verify_with_timeout(parse_with_timeout(f"\\boxed{{{truth}}}"), parse_with_timeout(boxed)))
    except Exception:  # noqa: BLE001 - an unparsable answer is simply not equivalent
        return False


def bare_number(boxed: str) -> str | None:
    """The number of a \\boxed{} answer that is one number with a unit or noun after it, else None.

    "\\boxed{50\\,\\%}", "\\boxed{\\text{50 dollars}}", "\\boxed{\\$18{,}000}" give "50", "50",
    "18000"; "\\boxed{50 \\times 2}", "\\boxed{5 hundred}" and "\\boxed{x}" give None.
    """
    try:
        answer = remove_boxed(boxed)
    except AssertionError:  # \fbox{} or an unclosed box: nothing to reduce
        return None
    # spaces before \text{}: "50\\quad\\text{dollars}" is "50 dollars", where "50\\quaddollars" would be nothing
    answer = re.sub(r"\s+", " ", _TEX_SPACE.sub(" ", answer))
    answer = re.sub(r"\\(?:text|textrm|mbox|mathrm)\{([^{}]*)\}", r"\1", answer)
    answer = answer.replace("{,}", ",").replace("\\%", "%").replace("\\$", "$").strip()
    match = _NUMBER_AND_UNIT.fullmatch(answer)
    if match is None:
        return None
    words = (match["words"] or "").lower().split()
    if any(len(w) < 2 or w in _VALUE_WORDS or w.removesuffix("s") in _VALUE_WORDS for w in words):
        return None
    return re.sub(r"[, ]", "", match["number"])


def score(text: str, truth: str) -> dict[str, float]:
    """accuracy: the last \\boxed{} answer equals the truth; format: there is a \\boxed{} answer.

    Trinity's MathBoxedRewardFn decides first (string normalisation); math_verify
    then catches equivalent forms it misses, on the answer as written and, when that is
    a number with a unit or noun after it, on the number alone (`bare_number`).
    """
    boxed = last_boxed_only_string(text)
    accuracy = _reward_fn(response=text, truth=truth)["accuracy"]
    if accuracy == 0.0 and boxed is not None:
        number = bare_number(boxed)
        if equivalent(boxed, truth) or (number is not None and equivalent(f"\\boxed{{{number}}}", truth)):
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
