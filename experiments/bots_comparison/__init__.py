"""BOTS against random with a real model on one GPU: the same training twice, then compared.

    python -m experiments.bots_comparison MODEL --before-only --out outputs/bots
    python -m experiments.bots_comparison MODEL --selector random --out outputs/bots --minutes 20
    python -m experiments.bots_comparison MODEL --selector difficulty --out outputs/bots --minutes 20
    python -m experiments.bots_comparison --report-only --out outputs/bots
    python -m experiments.bots_comparison.keep outputs/bots/random docs/bots/NAME/random   # to commit a run

Upstream's math example exists to show that Trinity's `difficulty_based` task selection (BOTS) trains
better than `random`. This trains `configs/config_random.yaml` and `configs/config_difficulty.yaml`
with the same model, data, seed, batch, group, learning rate and time budget, one selector per call
(one 30-minute hold of one GPU holds one run), and compares them.

Data: the GSM-Symbolic splits (`scripts/prepare_math_data.py --source gsm-symbolic`) with reference
pass-rate columns (`python -m experiments.math_pass_rates`), named by `--features`, weakest first:
BOTS's priors.

The shipped configs are upstream's, sized for 8 GPUs; the one-GPU variant is `runs.ONE_GPU`, applied
with the launcher's --set: shorter replies and context, and checkpoints to evaluate. Both runs also
get Trinity's `pass_rate_calculator` operator (the BOTS config has it already; the random selector
ignores its feedback): its `selection/valid_ratio`, the share of a step's tasks whose rollouts
neither all failed nor all succeeded, is the effective-task ratio, the tasks GRPO learns from.

A call, in order: (1) the base model on the test split, once, into <out>/before (`--before-only` stops
there, so that where a GPU is lent in short holds, the selectors' holds need not pay for it); (2) training for
`--minutes` (or `--steps`) into <out>/<selector>, with Trinity evaluating the policy on the test split
every `--eval-every` steps through the run's own engine; (3) its last checkpoint on the test split, into
<out>/<selector>/after; (4) the report over every run there is (`report.py`):
<out>/comparison.{md,json,png}, with the BOTS paper's time to baseline once both runs evaluated in-run.
"""
