#!/usr/bin/env bash
# Install the GPU stack offline, from a wheelhouse made by scripts/build_wheelhouse.sh.
#   bash scripts/install_gpu_offline.sh WHEELHOUSE [--target DIR]
# --target DIR: install the wheels into DIR (for machines whose site-packages is read-only) and use
#   them through PYTHONPATH. Env: PYTHON (default python3), the interpreter that already holds the base
#   (torch with CUDA, numpy>=2, ...: requirements/gpu-base.txt). Nothing here touches the network.
set -euo pipefail

usage() { echo "usage: $0 WHEELHOUSE [--target DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
wheels="$(cd "$1" && pwd)"
shift
target=""
if [ $# -gt 0 ]; then
  [ "$1" = --target ] && [ $# -eq 2 ] || usage
  mkdir -p "$2"
  target="$(cd "$2" && pwd)"
fi
cd "$(dirname "$0")/.."
repo="$(pwd)"
python="${PYTHON:-python3}"

# 1. Every wheel intact: a truncated copy would otherwise fail deep inside pip, or not at all.
[ -f "$wheels/SHA256SUMS" ] || { echo "ERROR: $wheels/SHA256SUMS is missing" >&2; exit 1; }
(cd "$wheels" && sha256sum --quiet --strict -c SHA256SUMS) \
  || { echo "ERROR: the files named above are missing or corrupt in $wheels" >&2; exit 1; }

# 2. The base: the lock is installed without dependencies, so what it leaves out must already be here.
torch_pin="$(sed -n 's/^torch==\([^ #]*\).*/\1/p' requirements/gpu-base.txt)"
[ -n "$torch_pin" ] || { echo "ERROR: no torch==VERSION line in requirements/gpu-base.txt" >&2; exit 1; }
"$python" - "$torch_pin" <<'PY'
import importlib.metadata as md, re, sys
pin = sys.argv[1]
try:
    import torch
except ImportError as e:
    sys.exit(f"ERROR: torch is not importable ({e}); the base must provide torch=={pin} with CUDA")
if torch.__version__.split("+")[0] != pin:  # "2.11.0+cu130" -> "2.11.0"
    sys.exit(f"ERROR: torch {torch.__version__} here, but vllm in the lock pins torch=={pin}")
if not torch.cuda.is_available():  # a warning only, so the install can be tried on a CPU machine
    print("WARNING: torch sees no CUDA device; the training runs will not start here")
import numpy
if int(numpy.__version__.split(".")[0]) < 2:
    sys.exit(f"ERROR: numpy {numpy.__version__}: the base must provide numpy>=2")
# The other base names: only reported, the import check below is what decides.
missing = []
for line in open("requirements/gpu-base.txt"):
    name = re.split(r"[\s<>=!~;\[#]", line.strip())[0]  # "numpy>=2  # why" -> "numpy"
    if name:
        try:
            md.version(name)
        except md.PackageNotFoundError:
            missing.append(name)
if missing:
    print("WARNING: not installed in the base:", " ".join(missing))
print(f"base: python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}")
PY

# 3. The locked set, exactly: --no-deps keeps pip from replacing the base's torch/numpy;
# --no-compile: pip writes .pyc files one at a time, step 4 writes them on every core.
pip=("$python" -m pip install -q --no-index --no-deps --no-compile --find-links "$wheels")
if [ -n "$target" ]; then
  # --upgrade: without it pip skips packages already present in DIR, so a re-run would keep old files
  "${pip[@]}" --upgrade --target "$target" -r requirements/lock-gpu.txt
  # The project itself cannot go into DIR as an editable install: it is used from the repo via PYTHONPATH.
  export PYTHONPATH="$target:$repo${PYTHONPATH:+:$PYTHONPATH}"
else
  "${pip[@]}" -r requirements/lock-gpu.txt
  # The project, without deps; no build isolation, as that would try to fetch setuptools.
  "${pip[@]}" --no-build-isolation -e .
fi

# 4. Bytecode for every module, written once here. Every process of a run (vLLM's three, each workflow runner, each
# trainer worker) imports vLLM, torch and transformers, about 11 s more each from source (docs/gpu.md, Start-up).
# Python writes these files on first import itself, but not where PYTHONDONTWRITEBYTECODE is set, as in many
# container images. The base's torch is compiled too where it is writable. Exit status ignored: some packages ship
# files that are not meant to compile (templates).
site="${target:-$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')}"
base="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
folders=("$site")
if [ "$base" != "$site" ] && [ -w "$base" ]; then folders+=("$base"); fi
echo "writing bytecode in ${folders[*]}"
"$python" -m compileall -q -j 0 "${folders[@]}" > /dev/null 2>&1 || true

# 5. The imports the training runs depend on, with the versions actually picked up.
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/check_gpu_imports.py

if [ -n "$target" ]; then
  echo "Installed into $target. Before running the project (the repo root must be on PYTHONPATH too):"
  echo "  export PYTHONPATH=$target:$repo\${PYTHONPATH:+:\$PYTHONPATH}"
fi
