#!/usr/bin/env bash
# Install the project for GPU training in one command, on a Linux x86-64 machine with an NVIDIA driver
# for CUDA 13 and the package index in reach:
#   bash scripts/install_gpu.sh          # into .venv-gpu, with Python 3.12
# It installs the set that ran on the GPU machine: every package of requirements/lock-gpu.txt at its
# locked version, and around it the base that machine had (requirements/gpu-base.txt: torch 2.11.0
# with CUDA from the package index, numpy 2, ...), resolved by uv. The locked versions, and numpy>=2,
# override what the packages declare (requirements/gpu-overrides.txt says why).
# flash-attn has no wheel for torch 2.11 with CUDA 13; the trainer runs without it (docs/gpu.md, "flash-attn,
# or not"). Where a matching wheel exists, install it into the venv and `--attn auto` uses it.
# Env: PYTHON (default python3.12), VENV (default .venv-gpu). Offline: scripts/install_gpu_offline.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3.12}"
venv="${VENV:-.venv-gpu}"
# What uv resolves; tests/test_gpu_install.py resolves the same for Python 3.12 on Linux x86-64.
sources=(-r requirements/lock-gpu.txt -r requirements/gpu-base.txt
         --override requirements/lock-gpu.txt --override requirements/gpu-overrides.txt)
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --progress-bar off "uv==0.13.9"
# --compile-bytecode: every process of a run imports vLLM, torch and transformers; with the .pyc files written
# here it starts about 11 s sooner where PYTHONDONTWRITEBYTECODE keeps Python from writing them (docs/gpu.md).
"$venv/bin/python" -m uv pip install --python "$venv/bin/python" --compile-bytecode "${sources[@]}"
"$venv/bin/python" -m uv pip install --python "$venv/bin/python" --no-deps -e .
"$venv/bin/python" scripts/check_gpu_imports.py
echo "installed into $venv; run with $venv/bin/python"
