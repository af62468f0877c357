#!/usr/bin/env bash
# One GPU hold: issue 61's learning levers, each a run of the two-hold run's first hold from the base model:
#   bash experiments/holds/frozenlake_levers.sh MODEL OUT [NAME="FLAG ..." ...]
# Each run is frozenlake_long.sh's with 16 explore steps, so that it trains on the maps
# hold 1 trained on, in the same order (a new run's task selector starts at the split's first row), and is
# evaluated on the same test maps and seeds (docs/learning/base/before). Hold 1, docs/learning/long/hold1, is
# the baseline. Without NAME=FLAGS, the levers not yet run (the others' pages: the unseen-runs page,
# docs/results/2026-12-06-frozenlake-unseen-runs.md): hold 1 again unchanged, to tell how far two runs of the
# same settings land apart (and the speed baseline on this machine); BOTS picking the maps; and a step that
# ends without its slowest map (explorer.over_rollout, 7 of 8 maps). Trinity saves a run's last update when its
# steps run out, so no run saves before that: saves are a large share of a trainer step
# (docs/results/2026-12-06-h100-served-ceiling-sync-levers.md).
# A lever's NAME=VALUE words with an upper-case NAME are its launch's environment (RFTKIT_MICRO_BATCH_SHARE=0: the
# micro-batches weighted as Trinity-RFT weighs them, rftkit.trainer.loss_scale), the rest its flags.
# The GGUF is converted once, by the first run; each run's exit is printed as "<name> rc=N" for the polls.
# With CARRY set to a new folder, the first run's weights are packed there (frozenlake_long.sh's CARRY, and its
# CARRY_BASE), so that `repeat`, first by default, is also the first hold of a run across holds.
set -uo pipefail
model="${1:?usage: frozenlake_levers.sh MODEL OUT [NAME=\"FLAG ...\" ...]}"; out="${2:?OUT}"; shift 2
(( $# )) || set -- repeat="" bots="--selector difficulty" \
  over8="--set explorer.over_rollout.ratio=0.125 --set explorer.over_rollout.wait_after_min=0"
carry="${CARRY:--}"
for lever in "$@"; do
  name="${lever%%=*}"; read -ra words <<< "${lever#*=}"
  environment=(); flags=()
  for word in "${words[@]}"; do
    if [[ $word =~ ^[A-Z][A-Z0-9_]*= ]]; then environment+=("$word"); else flags+=("$word"); fi
  done
  env "${environment[@]}" bash experiments/holds/frozenlake_long.sh "$model" docs/learning/base/before "$out/$name" 8 \
    "$carry" 16 --save-every 100 "${flags[@]}"
  echo "$name rc=$?"
  carry=-
  if [ -f "$out/$name/model/config.json" ]; then model="$out/$name/model"; fi
done
