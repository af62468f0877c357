#!/usr/bin/env bash
# One GPU hold of the long FrozenLake run, which the next hold continues on a fresh machine:
#   bash experiments/holds/frozenlake_long.sh MODEL BEFORE OUT MINUTES CARRY [STEPS [FLAG ...]]
# MODEL: the GGUF (first hold), or the previous hold's pieces (CARRY as brought back: SHA256SUMS and the
#   pieces), which are unpacked into OUT/model first, or a model folder;
# BEFORE: MODEL's evaluation on the same test maps and seeds (docs/learning/base/before for the base model,
#   the previous hold's <out>/after for a continuation), so that no minute goes to evaluating it again.
# The run's settings are the LoRA sweep's whole-model run's (docs/results/2026-12-06-h100-frozenlake-lora-sweep.md)
# with a sync every 2 steps, which lets the explorer roll out while the trainer trains (its measurement:
# docs/results/2026-12-06-h100-served-ceiling-sync-levers.md). The last checkpoint's weights end in CARRY, a new
# folder outside OUT (so that packing OUT's reports leaves them out), as bf16 pieces of 15 MiB to bring back a
# few at a time; the optimizer's state stays behind. CARRY "-" packs nothing (a run no later hold goes on from).
# With CARRY_BASE set to the model the first hold started from (the GGUF, which every hold's bundle has), only
# the weights' changes from it are packed, a fraction of the pieces; the next hold, given the same CARRY_BASE,
# unpacks them against it. Two holds, each on a fresh machine with the GPU kit's bundle (the second's extra/
# holding the first's pieces and after/):
#   CARRY_BASE=/tmp/stage/qwen.gguf bash experiments/holds/frozenlake_long.sh /tmp/stage/qwen.gguf \
#     docs/learning/base/before /tmp/res/long1 8 /tmp/carry 16
#   CARRY_BASE=/tmp/stage/qwen.gguf bash experiments/holds/frozenlake_long.sh /tmp/stage/extra/carry \
#     /tmp/stage/extra/after /tmp/res/long2 8 /tmp/carry2 32
# STEPS ends the run after that many explore steps, when Trinity saves the last update, so that nothing trained
# is lost to the checkpoint interval; MINUTES stays the limit if the machine is slower than expected.
# FLAGs go to experiments.frozenlake_learning after the script's own, so that a lever overrides them.
set -euo pipefail
model="${1:?usage: frozenlake_long.sh MODEL BEFORE OUT MINUTES CARRY}"; before="${2:?BEFORE}"; out="${3:?OUT}"
minutes="${4:?MINUTES}"; carry="${5:?CARRY}"; steps=(${6:+--steps "$6"}); shift $(( $# < 6 ? $# : 6 ))
mkdir -p "$out"
cp -r "$before" "$out/before"
if [ -f "$model/SHA256SUMS" ]; then
  python3 -m experiments.carry_weights unpack "$model" "$out/model" ${CARRY_BASE:+--base "$CARRY_BASE"}
  model="$out/model"
fi
python3 -m experiments.frozenlake_learning "$model" --out "$out" --data data/frozenlake --minutes "$minutes" "${steps[@]}" \
  --batch 8 --group 16 --save-every 10 --skip-before \
  --set buffer.train_batch_size=256 --set explorer.runner_prepare_concurrency=16 \
  --set synchronizer.sync_interval=2 "$@"
[ "$carry" = - ] && exit 0
trained=$(python3 -c "import sys; from pathlib import Path; from runkit.runs import last_checkpoint
print(last_checkpoint(Path(sys.argv[1])))" "$out/checkpoints")
python3 -m experiments.carry_weights pack "$trained" "$carry" ${CARRY_BASE:+--base "$CARRY_BASE"}
