#!/usr/bin/env bash
# One GPU hold: the rollout readings left, then the trainer readings left:
#   bash experiments/holds/rollout_levers.sh MODEL OUT [MINUTES]
# MODEL: the GGUF or a model folder. Three FrozenLake launches at the learning run's sizes (experiments.startup),
# MINUTES each (default 4) from its launch, one after the other on the same machine: the default; prefix caching
# off, to read what reusing a multi-turn episode's history is worth; and fully_async, whose run folder keeps the
# explorer's calls (buffer/explorer_output.db) for experiments.engine_ceiling to replay on vLLM, the explorer
# against the engine in that mode. Then the trainer: FSDP1 and torch's fused AdamW beside the default, with the
# padded reference for their log-prob gaps, all in one call so that they compare. Each command's exit is printed
# as "<name> rc=N", so that a poll sees how far the hold got.
set -uo pipefail
model="${1:?usage: rollout_levers.sh MODEL OUT [MINUTES]}"; out="${2:?OUT}"; minutes="${3:-4}"
[ -f data/frozenlake/train.parquet ] || python3 scripts/get_frozenlake_data.py --map_max_size 6
python3 -m experiments.startup "$model" --out "$out/levers" --data data/frozenlake --minutes "$minutes" \
  --variant default --variant noprefix=explorer.rollout_model.enable_prefix_caching=false \
  --variant fullasync=synchronizer.sync_style=fully_async,buffer.explorer_input.eval_tasksets=[]
echo "levers rc=$?"
run=$(dirname "$(ls -d "$out"/levers/fullasync/checkpoints/*/*/log 2>/dev/null | head -1)")
# steps 1 to 4: a fully_async explorer ends no sync group before its last step, so its window starts at its start
python3 -m experiments.engine_ceiling "$run" "$out/levers/model" --steps 1:4 --out "$out/ceiling" --served
echo "ceiling rc=$?"
python3 -m experiments.trainer_speed math --out "$out/trainer" --tokenizer "$out/levers/model" --steps 3 \
  --settings sdpa-blocks liger-fused liger-fused-fsdp1 liger-fused-adamw
echo "trainer rc=$?"
