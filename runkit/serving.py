"""A model served for an evaluation: vLLM's OpenAI-compatible server on 127.0.0.1, for the time a block
runs, of an HF model folder (a GGUF file is turned into one first). The experiments evaluate a model
before and after training, or several reference models, this way."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from rftkit.files import atomic_folder
from rftkit.inputs import InputError
from runkit.steps import log, tail

SERVED_NAME = "policy"  # the model name the server answers to, and evaluate.py asks for
BASE_NAME = "base"  # with an adapter: the name of the model under it, so that SERVED_NAME is base + adapter
READY_POLL_S = 0.5  # seconds between two looks at /health while the server starts


def hf_from_gguf(gguf: Path, out_dir: Path) -> Path:
    """An HF model folder (bf16 safetensors, tokenizer, chat template) made from a GGUF file."""
    if (out_dir / "config.json").is_file():
        return out_dir
    tokenizer, loaded = load_gguf(gguf)
    # transformers dequantizes the GGUF's weights but keeps the model marked as gguf-quantized, which it refuses
    # to save: unmarked, the model saves as the plain bf16 one it is (a copy into a fresh model saves the same
    # bytes, seconds later: benchmarks/gguf_conversion.py).
    unmark_quantized(loaded)
    with atomic_folder(out_dir) as partial:  # only a complete folder gets the final name
        tokenizer.save_pretrained(partial)
        loaded.save_pretrained(partial)
    return out_dir


def load_gguf(gguf: Path):
    """(tokenizer, bf16 model) as transformers loads them from a GGUF file, its metadata parsed once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    with gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        return tokenizer, AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)


def unmark_quantized(model) -> None:
    """Drop the gguf quantizer and quantization config transformers leaves on a model it loaded from a GGUF file."""
    model.hf_quantizer = None  # what save_pretrained checks (transformers 5.24)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


@contextlib.contextmanager
def gguf_parsed_once():
    """transformers parses a GGUF file's metadata (the whole vocabulary) once for the tokenizer, once for the
    config and once for the weights, and builds gguf's tensor-name map once per submodule. Both are pure
    functions of their arguments: while this context lasts, each is computed once (patch `gguf.parsed_once`)."""
    import functools
    import importlib

    import gguf

    from rftkit.patches.apply import replace, require

    patch = "gguf.parsed_once"
    require(patch, importlib.import_module("transformers.modeling_gguf_pytorch_utils"))
    undo = [replace(patch, gguf, name, functools.lru_cache(maxsize=None))
            for name in ("GGUFReader", "get_tensor_name_map")]
    try:
        yield
    finally:
        for step in undo:
            step()


def model_folder(model: Path, out_dir: Path) -> Path:
    """MODEL as an HF folder for vLLM and the trainer: the folder itself, or a GGUF converted into `out_dir`."""
    model = model.resolve()
    if model.suffix != ".gguf":
        return model
    log(f"converting {model.name} to an HF folder")
    return hf_from_gguf(model, out_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thinks(model: Path) -> bool:
    """Whether the model's tokenizer has Qwen3's `</think>`, which vLLM's deepseek_r1 reasoning parser needs
    (an engine given that parser for a model without the token does not start)."""
    from transformers import AutoTokenizer

    return "</think>" in AutoTokenizer.from_pretrained(model).get_vocab()


def engine_flags(config: str | Path, model: Path, thinking: bool | None = None) -> list[str]:
    """CONFIG's rollout engine (`explorer.rollout_model`) as `vllm serve` flags, so that an evaluation
    serves the model as training does: its tool-call and reasoning parsers, and its compilation settings
    (`extra_engine_args.compilation_config`, which decide how long the server takes to start). Without a
    tool parser, vLLM answers every request that offers the agent a tool (the math agent's Python tool)
    with an error; the reasoning parser is left out for a model without `</think>`. `thinking` is
    `thinks(model)` where the caller has asked already (its tokenizer is then not loaded again)."""
    from rftkit.overrides import load_yaml

    rollout = (load_yaml(config).get("explorer") or {}).get("rollout_model") or {}
    flags = []
    if rollout.get("enable_auto_tool_choice"):
        flags.append("--enable-auto-tool-choice")
    if rollout.get("tool_call_parser"):
        flags += ["--tool-call-parser", rollout["tool_call_parser"]]
    if rollout.get("reasoning_parser") and (thinks(model) if thinking is None else thinking):
        flags += ["--reasoning-parser", rollout["reasoning_parser"]]
    compilation = (rollout.get("extra_engine_args") or {}).get("compilation_config")
    if compilation:
        flags += ["--compilation-config", json.dumps(compilation, separators=(",", ":"))]
    return flags


def adapter_flags(adapter: Path) -> list[str]:
    """`vllm serve` flags that serve a LoRA adapter (a folder as PEFT saves one) over the model as SERVED_NAME, at
    the smallest `max_lora_rank` vLLM offers that holds its rank."""
    from rftkit.lora import check_adapter, servable_ranks

    rank, served = check_adapter(adapter, "--adapter").get("r"), servable_ranks()
    fits = [r for r in served if isinstance(rank, int) and r >= rank]
    if not fits:
        raise InputError(f"--adapter {adapter}: rank {rank!r} in its adapter_config.json; vLLM serves ranks up to "
                         f"{served[-1]}")
    return ["--enable-lora", "--lora-modules", f"{SERVED_NAME}={adapter.resolve()}", "--max-lora-rank", str(fits[0])]


def vllm_command(model: Path, port: int, tokenizer: Path, max_model_len: int, flags: list[str],
                 adapter: Path | None = None) -> list[str]:
    """`vllm serve` of `model` as SERVED_NAME, or with `adapter` of model + adapter as SERVED_NAME (the model
    alone as BASE_NAME)."""
    served = SERVED_NAME if adapter is None else BASE_NAME
    return [sys.executable, "-m", "runkit.vllm_serve", "--model", str(model),
            "--tokenizer", str(tokenizer), "--served-model-name", served, "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", str(max_model_len), "--dtype", "bfloat16",
            "--gpu-memory-utilization", "0.8", "--seed", "0", *flags,
            *(adapter_flags(adapter) if adapter is not None else [])]


@contextlib.contextmanager
def vllm_server(model: Path, tokenizer: Path, log_file: Path, max_model_len: int, flags: list[str],
                timeout: float = 900, env: dict | None = None, adapter: Path | None = None):
    """`vllm serve` of `model` (with `adapter`: of model + adapter, `vllm_command`) on 127.0.0.1 with extra
    `flags` (`engine_flags`), in environment `env` (this one's by default); yields the /v1 base URL as soon as
    it answers; stops it (and its workers) on exit."""
    port = free_port()
    command = vllm_command(model, port, tokenizer, max_model_len, flags, adapter)
    with open(log_file, "w") as out:
        server = subprocess.Popen(command, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        deadline = time.time() + timeout
        while True:
            if server.poll() is not None:
                raise SystemExit(f"error: vLLM exited with {server.returncode} before serving; see {log_file}:\n"
                                 f"{tail(log_file)}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit(f"error: vLLM did not answer within {timeout:.0f} s; see {log_file}") from None
                time.sleep(READY_POLL_S)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
