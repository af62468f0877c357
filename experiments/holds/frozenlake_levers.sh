#!/usr/bin/env bash
# One GPU hold: issue 61's learning levers, each a run of the two-hold run's first hold from the base model:
#   bash experiments/holds/frozenlake_levers.sh MODEL OUT [NAME="FLAG ..." ...]
# Each run is frozenlake_long.sh's with 16 explore steps and nothing carried, so that it trains on the maps
# hold 1 trained on, in the same order (a new run's task selector starts at the split's first row), and is
# evaluated on the same test maps and seeds (docs/learning/base/before). Hold 1, docs/learning/long/hold1, is
# the baseline and is not run again. Without NAME=FLAGS, the levers not yet run (4e-6 ran:
# docs/results/2026-12-06-frozenlake-lr-4e-6.md): 16 maps of 8 rollouts, the whole model's learning rate at 2e-6
# (with gradient clipping at 1.0, the learning rate is what sets an update's size), BOTS picking the maps, and
# Trinity's fully_async mode (no evaluation set: Trinity refuses one with it; the evaluations here are the
# script's own). The learning rate changes no step's work, so the 2e-6 run is also the others' speed baseline
# on the same machine. Trinity saves a run's last update when its steps run out, so no run saves before that:
# saves are a large share of a trainer step (docs/results/2026-12-06-h100-served-ceiling-sync-levers.md).
# The GGUF is converted once, by the first run; each run's exit is printed as "<name> rc=N" for the polls.
set -uo pipefail
model="${1:?usage: frozenlake_levers.sh MODEL OUT [NAME=\"FLAG ...\" ...]}"; out="${2:?OUT}"; shift 2
(( $# )) || set -- maps16="--batch 16 --group 8" lr2e-6="--lr 2e-6" bots="--selector difficulty" \
  fullasync="--set synchronizer.sync_style=fully_async --set buffer.explorer_input.eval_tasksets=[]"
for lever in "$@"; do
  name="${lever%%=*}"; read -ra flags <<< "${lever#*=}"
  bash experiments/holds/frozenlake_long.sh "$model" docs/learning/base/before "$out/$name" 8 - 16 \
    --save-every 100 "${flags[@]}"
  echo "$name rc=$?"
  [ -f "$out/$name/model/config.json" ] && model="$out/$name/model"
done
