#!/usr/bin/env bash
# Install the project into .venv on a CPU-only machine (Python 3.11), with the tested versions.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3.11}"
# A new .venv takes about 3.5 GB, besides pip's downloads. Check the disk first: a disk that fills
# halfway makes pip stop with "No space left on device" and leaves a .venv that is neither old nor new.
need_gib="${INSTALL_NEED_GIB:-4}"
if [ ! -x .venv/bin/python ]; then
  free_kib=$(df -Pk . | awk 'NR == 2 {print $4}')
  if [ "$free_kib" -lt $((need_gib * 1024 * 1024)) ]; then
    echo "error: $(pwd): $((free_kib / 1024)) MiB free on this disk; a new .venv needs about $need_gib GiB" >&2
    exit 1
  fi
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --progress-bar off)
"${pip[@]}" -U pip
# torch first, pinned: anything unpinned would fetch a multi-GB CUDA build instead of the CPU wheel.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -e ".[test,local]" -c requirements/lock-cpu.txt
# Packages whose declared dependencies are not needed here (see the file).
"${pip[@]}" --no-deps -r requirements/nodeps.txt
echo "installed into .venv"
