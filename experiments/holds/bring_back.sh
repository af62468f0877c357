#!/usr/bin/env bash
# On the GPU machine: pack what a hold brings back, each run's reports and its own records, without weights:
#   bash experiments/holds/bring_back.sh OUT.tgz FOLDER...
# Left out: the converted or unpacked model (model/), the saved steps (global_step_*), the experience buffer and
# any weights file. Kept: everything else, among it the run's log/, monitor/ (its scalars), gpu_samples.csv,
# startup.jsonl and the launch's config, which experiments.keep_learning and the reports read. A call brings
# back files of at most 16 MiB; a hold's learning run packs to a few MiB.
set -euo pipefail
out="${1:?usage: bring_back.sh OUT.tgz FOLDER...}"; shift
(( $# )) || { echo "usage: bring_back.sh OUT.tgz FOLDER..." >&2; exit 2; }
for folder in "$@"; do [ -d "$folder" ] || { echo "error: FOLDER $folder: no such folder" >&2; exit 2; }; done
trap 'rm -f "$out.partial"' EXIT  # a tar cut short leaves nothing under OUT's name
tar czf "$out.partial" --exclude=model --exclude='global_step_*' --exclude=buffer --exclude='*.safetensors' \
  --exclude='*.pt' --exclude='*.bin' --exclude='*.gguf' "$@"
mv "$out.partial" "$out"
ls -l "$out"
