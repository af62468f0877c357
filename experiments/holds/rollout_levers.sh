#!/usr/bin/env bash
# One GPU hold: a rollout lever against the default, then five trainer settings:
#   bash experiments/holds/rollout_levers.sh MODEL OUT [MINUTES]
# MODEL: the GGUF or a model folder. Each launch is FrozenLake at the learning run's sizes, MINUTES (default 4)
# from its launch, one after the other: the default, then a step without its slowest map
# (explorer.over_rollout). 16 maps x 8 rollouts and Trinity's fully_async mode were measured as learning runs
# instead (docs/results/2026-12-06-frozenlake-levers-2e-6-maps16-fully-async.md). Longer than the 3 minutes of
# docs/results/2026-12-06-h100-served-ceiling-sync-levers.md, which left too few explore steps on a slow host.
# Each command's exit is printed as "<name> rc=N", so that a poll sees how far the hold got.
set -uo pipefail
model="${1:?usage: rollout_levers.sh MODEL OUT [MINUTES]}"; out="${2:?OUT}"; minutes="${3:-4}"
[ -f data/frozenlake/train.parquet ] || python3 scripts/get_frozenlake_data.py --map_max_size 6
python3 -m experiments.startup "$model" --out "$out/levers" --data data/frozenlake --minutes "$minutes" \
  --variant default \
  --variant over8=explorer.over_rollout.ratio=0.125,explorer.over_rollout.wait_after_min=0
echo "levers rc=$?"
python3 -m experiments.trainer_speed math --out "$out/trainer" --tokenizer "$out/levers/model" \
  --settings liger-fused liger-fused-no-ckpt liger-fused-no-reshard liger-fused-adamw liger-fused-fsdp1
echo "trainer rc=$?"
