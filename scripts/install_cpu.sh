#!/usr/bin/env bash
# Install the project into .venv on a CPU-only machine (Python 3.11), with the tested versions.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3.11}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --progress-bar off)
"${pip[@]}" -U pip
# torch first, pinned: anything unpinned would fetch a multi-GB CUDA build instead of the CPU wheel.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -e ".[test,local]" -c requirements/lock-cpu.txt
# Packages whose declared dependencies are not needed here (see the file).
"${pip[@]}" --no-deps -r requirements/nodeps.txt
echo "installed into .venv"
