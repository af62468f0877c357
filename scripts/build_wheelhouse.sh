#!/usr/bin/env bash
# Build the wheelhouse for an offline GPU install (scripts/install_gpu_offline.sh), on a connected machine.
#   bash scripts/build_wheelhouse.sh [DIR]        # default: wheelhouse/
# Env: PYTHON (the pip to run, default python3), GPU_PYTHON_VERSION (the target's Python, default 3.12).
# Downloads one wheel per line of requirements/lock-gpu.txt for the target (cp3XX, manylinux x86-64),
# whatever this machine's own Python and platform are, then writes DIR/SHA256SUMS.
set -euo pipefail

dir="${1:-wheelhouse}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"              # absolute: we cd to the repo root next
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
pyver="${GPU_PYTHON_VERSION:-3.12}"
lock=requirements/lock-gpu.txt

# Only these have no wheel on PyPI; both are pure Python, so a wheel built here works on the target.
sdist_only=" antlr4-python3-runtime word2number "

# pip matches platform tags exactly (no "manylinux_2_28 implies 2_17" when cross-downloading), so list
# every tag the locked wheels use. pip prefers earlier tags where a release has several wheels
# (cryptography, apache-tvm-ffi): manylinux_2_28 first gives the builds that ran on the GPU machine.
platforms=()
for tag in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux1 \
           manylinux_2_24 manylinux_2_27 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  platforms+=(--platform "${tag}_x86_64")
done

n=0
# Each line is "name==version", optionally followed by a comment; blank and comment lines are skipped.
while read -r req _; do
  case "$req" in ''|'#'*) continue ;; esac
  n=$((n + 1))
  name="${req%%==*}"
  if [[ "$sdist_only" == *" $name "* ]]; then
    "$python" -m pip wheel -q --no-deps -w "$dir" "$req" || { echo "ERROR: could not build a wheel for $req" >&2; exit 1; }
    # It must be pure Python (*-none-any): a platform wheel would be built for this host, not the target.
    compgen -G "$dir/${name//-/_}-${req#*==}-*-none-any.whl" > /dev/null \
      || { echo "ERROR: $req did not build as a pure-Python wheel" >&2; exit 1; }
  else
    # --no-deps: the lock is the whole set; --only-binary: never fall back to an sdist built for this host
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
      "${platforms[@]}" -d "$dir" "$req" || { echo "ERROR: could not fetch a cp${pyver/./} manylinux x86-64 wheel for $req" >&2; exit 1; }
  fi
done < "$lock"

# One wheel per lock line: more means leftovers from an older lock in DIR (they would be checksummed too).
count=$(find "$dir" -maxdepth 1 -name '*.whl' | wc -l)
[ "$count" -eq "$n" ] || { echo "ERROR: $dir holds $count wheels for $n lock lines; start from an empty DIR" >&2; exit 1; }

(cd "$dir" && sha256sum -- *.whl > SHA256SUMS)
echo "$count wheels, $(du -sh --exclude=SHA256SUMS "$dir" | cut -f1) in $dir (checksums in $dir/SHA256SUMS)"
