"""`python -m runkit.vllm_serve ARGS`: vLLM's OpenAI-compatible server (`vllm.entrypoints.openai.api_server`
with the same ARGS), in one Python start-up instead of three.

Before vLLM 0.23.0's server answers, three Python processes in a row each import torch and vLLM: the
server; a subprocess in which the model registry inspects the model class; and the engine core, which the
server's command line starts with `spawn` (it sets VLLM_WORKER_MULTIPROC_METHOD=spawn where the environment
has none). What that costs, and what this saves: `docs/results/2026-12-04-eval-server.md`.

Unless RFTKIT_LEAN_ENGINE is set to something other than 1 (0 turns it off, as in the launcher's workers), here:

* the model class is inspected in the server's own process, with the patch the training engines use
  (`lean_engine.inspect_here` in rftkit.patches);
* the engine core is forked (VLLM_WORKER_MULTIPROC_METHOD=fork, vLLM's default as a library, unless the
  environment names a method), so it starts with the server's imports done. vLLM itself falls back to
  `spawn` where CUDA is already initialised in the server, so no CUDA state reaches the engine.
"""

from __future__ import annotations

import os
import runpy

from rftkit.patches import LEAN_ENGINE_ENV
from rftkit.patches.apply import install

SERVER = "vllm.entrypoints.openai.api_server"
METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"


def main() -> None:
    # the launcher's rule for its workers ("1" unless set)
    if (os.environ.get(LEAN_ENGINE_ENV) or "1") == "1":
        os.environ[LEAN_ENGINE_ENV] = "1"
        install("vllm server")
        os.environ.setdefault(METHOD_ENV, "fork")
    runpy.run_module(SERVER, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
