"""gsm8k_judge on equivalent and wrong answers."""

import asyncio

import pytest
from agentscope.message import Msg
from trinity.common.rewards.math_reward import MathBoxedRewardFn

from math_bots.judge import ground_truth, gsm8k_judge


@pytest.mark.parametrize("reply,truth,accuracy,fmt", [
    ("The answer is \\boxed{72}.", "72", 1.0, 1.0),
    ("So x = \\boxed{\\frac{1}{2}}", "0.5", 1.0, 1.0),      # Trinity's function alone scores 0
    ("It costs \\boxed{18,000} dollars.", "18000", 1.0, 1.0),  # Trinity's function alone scores 0
    ("\\boxed{\\dfrac{3}{4}}", "0.75", 1.0, 1.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0, 1.0),
    ("<think>hmm</think> \\boxed{3}", "3", 1.0, 1.0),
    ("First \\boxed{5}, no, finally \\boxed{6}", "6", 1.0, 1.0),   # the last box counts
    ("First \\boxed{6}, no, finally \\boxed{5}", "6", 0.0, 1.0),
    ("\\boxed{71}", "72", 0.0, 1.0),
    ("\\boxed{0.333}", "\\frac{1}{3}", 0.0, 1.0),
    ("\\boxed{1,2}", "12", 0.0, 1.0),
    ("The answer is 72.", "72", 0.0, 0.0),                  # no \boxed{}: not an answer
    ("\\boxed{", "5", 0.0, 0.0),
    ("", "5", 0.0, 0.0),
])
def test_judge_scores_equivalent_and_wrong_answers(reply, truth, accuracy, fmt):
    task = {"question": "?", "answer": f"Some working.\n#### {truth}"}
    out = asyncio.run(gsm8k_judge(task, Msg("react_agent", reply, "assistant"), None))
    assert out.reward == accuracy
    assert out.metrics == {"accuracy": accuracy, "format": fmt}


@pytest.mark.parametrize("boxed,truth,accuracy", [
    # percent written in LaTeX
    ("50\\%", "50", 1.0), ("51\\%", "50", 0.0),
    ("50\\,\\%", "50", 1.0), ("51\\,\\%", "50", 0.0),
    ("50%", "50", 1.0), ("51%", "50", 0.0),
    # a unit or noun after the number, plain or in \text{}
    ("50 dollars", "50", 1.0), ("51 dollars", "50", 0.0),
    ("50 dollar", "50", 1.0), ("51 dollar", "50", 0.0),
    ("50 cookies", "50", 1.0), ("51 cookies", "50", 0.0),
    ("50 people", "50", 1.0), ("51 people", "50", 0.0),
    ("\\text{50 dollars}", "50", 1.0), ("\\text{51 dollars}", "50", 0.0),
    ("50 \\text{ dollars}", "50", 1.0), ("51 \\text{ dollars}", "50", 0.0),
    ("50 students", "50", 1.0), ("51 students", "50", 0.0),
    ("50 miles", "50", 1.0), ("51 miles", "50", 0.0),
    ("50 percent", "50", 1.0), ("51 percent", "50", 0.0),
    ("-50 dollars", "-50", 1.0), ("-50 dollars", "50", 0.0),
    # thousands separators
    ("18,000", "18000", 1.0), ("18,001", "18000", 0.0),
    ("18{,}000", "18000", 1.0), ("18{,}001", "18000", 0.0),
    ("18\\,000", "18000", 1.0), ("18\\,001", "18000", 0.0),
    ("18{,}000 dollars", "18000", 1.0), ("18{,}001 dollars", "18000", 0.0),
    # money
    ("$50", "50", 1.0), ("$51", "50", 0.0),
    ("\\$50", "50", 1.0), ("\\$51", "50", 0.0),
    ("\\$18,000", "18000", 1.0), ("\\$18,001", "18000", 0.0),
    # words that change the number, or more than one number: never reduced to the first number
    ("5 hundred", "5", 0.0), ("2 dozen", "2", 0.0), ("3 and a half", "3", 0.0), ("5 squared", "5", 0.0),
    ("5k", "5", 0.0), ("50 \\times 2", "50", 0.0), ("1,2 dollars", "12", 0.0),
])
def test_judge_scores_units_percent_separators_and_money(boxed, truth, accuracy):
    task = {"question": "?", "answer": f"Some working.\n#### {truth}"}
    reply = f"So the answer is \\boxed{{{boxed}}}."
    out = asyncio.run(gsm8k_judge(task, Msg("react_agent", reply, "assistant"), None))
    assert out.reward == accuracy
    assert out.metrics == {"accuracy": accuracy, "format": 1.0}


def test_math_verify_adds_what_trinity_misses():
    fn = MathBoxedRewardFn()
    assert fn(response="\\boxed{\\frac{1}{2}}", truth="0.5")["accuracy"] == 0.0
    assert fn(response="\\boxed{18,000}", truth="18000")["accuracy"] == 0.0


def test_ground_truth_parsing():
    assert ground_truth("He pays 3 * 4 = 12.\n#### 12") == "12"
    assert ground_truth("#### \\frac{1}{2} ") == "\\frac{1}{2}"
    assert ground_truth(204) == "204"


# Every TeX spacing command math_bots.judge reads as a space, as a model writes it.
TEX_SPACES = ["\\,", "\\:", "\\;", "\\!", "\\ ", "~", "\\quad", "\\qquad", "\\enspace", "\\thinspace",
              "\\medspace", "\\thickspace", "\\negthinspace", "\\space ", "\\hspace{1em}", "\\hspace*{2pt}",
              "\\hskip 2pt", "\\kern1em", "\\mkern 3mu", " \\, "]


@pytest.mark.parametrize("space", TEX_SPACES)
@pytest.mark.parametrize("template,truth", [
    ("{n}{space}\\text{{dollars}}", "50"),
    ("\\text{{{n}{space}dollars}}", "50"),
    ("{n}{space}\\%", "50"),
    ("\\${n}{space}\\text{{ dollars}}", "50"),
    ("18{space}000", "18000"),
])
def test_tex_spacing_between_a_number_and_its_unit_is_a_space_of_every_kind(space, template, truth):
    import re

    task = {"question": "?", "answer": f"Some working.\n#### {truth}"}
    if re.search(r"\\[A-Za-z]+$", space) and re.search(r"\{space\}[A-Za-z]", template):
        space += " "  # as TeX needs it: "\quad dollars", since "\quaddollars" is another command
    for number, accuracy in ((truth if "{n}" in template else "", 1.0), (str(int(truth) + 1), 0.0)):
        boxed = template.format(n=number, space=space) if "{n}" in template else \
            template.format(space=space).replace("000", "000" if accuracy else "001")
        out = asyncio.run(gsm8k_judge(task, Msg("react_agent", f"\\boxed{{{boxed}}}", "assistant"), None))
        assert out.reward == accuracy, boxed
