"""runkit/tiny_model.py on CPU: the folder it writes loads as a chat model that vLLM's parsers accept."""

import hashlib
import json
from pathlib import Path

import pytest

from runkit.tiny_model import AGENT_TOKENS, CHATML_TOKENS, build_tiny_model, main

TOOL = {
    "type": "function",
    "function": {
        "name": "execute_python_code",
        "description": "Run Python code and return its output.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}
TOOL_CALL_OUTPUT = '<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "print(1)"}}\n</tool_call>'


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """One build from the default GGUF: parsing the GGUF is the slow part, so tests share it."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_folder_has_the_promised_files_and_config(tiny_dir):
    from transformers import AutoConfig

    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tiny_model.json"):
        assert (tiny_dir / name).is_file(), name
    config = AutoConfig.from_pretrained(tiny_dir)
    assert config.architectures == ["LlamaForCausalLM"]
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (2, 256, 4)
    assert (config.num_key_value_heads, config.head_dim) == (2, 64)
    assert config.max_position_embeddings == 32768
    assert config.tie_word_embeddings is True
    assert str(config.dtype).endswith("bfloat16")
    generation = json.loads((tiny_dir / "generation_config.json").read_text())
    assert generation["do_sample"] is True and generation["temperature"] == 1.0
    assert generation["eos_token_id"] == config.eos_token_id


def test_tokens_are_single_special_ids_and_vocab_matches(tiny_dir, tokenizer):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_dir)
    assert len(tokenizer) == config.vocab_size
    for token in AGENT_TOKENS + CHATML_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, (token, ids)
        assert tokenizer.added_tokens_decoder[ids[0]].special, token
        assert tokenizer.decode(ids, skip_special_tokens=False) == token
    assert tokenizer.pad_token_id == config.pad_token_id is not None
    assert tokenizer.eos_token == "<|im_end|>" and config.eos_token_id == tokenizer.eos_token_id
    assert config.bos_token_id == tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_forward_pass_on_a_rendered_prompt(tiny_dir, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.dtype == torch.bfloat16
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits.float()).all()


def test_chat_template_renders_tools_calls_and_responses(tokenizer):
    messages = [
        {"role": "user", "content": "Print 1."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function",
             "function": {"name": "execute_python_code", "arguments": {"code": "print(1)"}}},
            {"id": "b", "type": "function",
             "function": {"name": "execute_python_code", "arguments": '{"code": "print(2)"}'}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": "Done."},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[TOOL], tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert "<tools>\n" + json.dumps(TOOL) + "\n</tools>" in text
    # Arguments given as a dict and as a JSON string render the same way: the exact JSON.
    second_call = TOOL_CALL_OUTPUT.replace("print(1)", "print(2)")
    assert "<|im_start|>assistant\n" + TOOL_CALL_OUTPUT + "\n" + second_call + "<|im_end|>\n" in text
    # Consecutive tool messages share one user turn.
    assert ("<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
            "<|im_end|>\n") in text
    assert text.endswith("<|im_start|>assistant\nDone.<|im_end|>\n")


def _vllm_parsers():
    """vLLM's registered `hermes` and `deepseek_r1` parser classes and its request type, or skip."""
    try:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.reasoning import ReasoningParserManager
        from vllm.tool_parsers import ToolParserManager
    except ImportError as error:
        # The CPU venv installs vllm --no-deps; these modules also need msgspec, py-cpuinfo and
        # partial-json-parser.
        pytest.skip(f"vllm's parsers do not import here: {error}")
    hermes = ToolParserManager.get_tool_parser("hermes")
    deepseek_r1 = ReasoningParserManager.get_reasoning_parser("deepseek_r1")
    return hermes, deepseek_r1, ChatCompletionRequest


def test_vllm_hermes_parser_reads_back_a_decoded_tool_call(tokenizer):
    hermes, _, ChatCompletionRequest = _vllm_parsers()
    parser = hermes(tokenizer)
    request = ChatCompletionRequest(model="tiny", messages=[{"role": "user", "content": "Print 1."}], tools=[TOOL])
    assert parser.adjust_request(request).skip_special_tokens is False
    # What vLLM hands the parser: the sampled ids decoded with special tokens kept.
    ids = tokenizer.encode(TOOL_CALL_OUTPUT, add_special_tokens=False)
    output = tokenizer.decode(ids, skip_special_tokens=False)
    assert output == TOOL_CALL_OUTPUT
    result = parser.extract_tool_calls(output, request)
    assert result.tools_called
    assert [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls] == [
        ("execute_python_code", {"code": "print(1)"})
    ]


def test_vllm_deepseek_r1_parser_finds_think_tokens(tokenizer):
    _, deepseek_r1, ChatCompletionRequest = _vllm_parsers()
    parser = deepseek_r1(tokenizer)
    assert parser.start_token_id == tokenizer.convert_tokens_to_ids("<think>")
    assert parser.end_token_id == tokenizer.convert_tokens_to_ids("</think>")
    request = ChatCompletionRequest(model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert parser.extract_reasoning("<think>plan</think>answer", request) == ("plan", "answer")


def test_exported_tokenizer_builds_the_same_model(tiny_dir, tokenizer, smollm2_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    assert not list(smollm2_tokenizer.glob("*.gguf")) and (smollm2_tokenizer / "tokenizer.json").is_file()
    rebuilt = build_tiny_model(tmp_path / "from-folder", smollm2_tokenizer)
    assert AutoTokenizer.from_pretrained(rebuilt).get_vocab() == tokenizer.get_vocab()
    assert (rebuilt / "chat_template.jinja").read_text() == (tiny_dir / "chat_template.jinja").read_text()
    # Same settings, vocabulary and seed: the same random weights.
    assert _sha256(rebuilt / "model.safetensors") == _sha256(tiny_dir / "model.safetensors")


def test_building_twice_reuses_the_model_and_new_settings_rebuild(smollm2_tokenizer, tmp_path):
    out = build_tiny_model(tmp_path / "m", smollm2_tokenizer)
    weights = out / "model.safetensors"
    first = (weights.stat().st_mtime_ns, _sha256(weights))
    assert build_tiny_model(out, smollm2_tokenizer) == out
    assert (weights.stat().st_mtime_ns, _sha256(weights)) == first
    build_tiny_model(out, smollm2_tokenizer, seed=1)
    assert _sha256(weights) != first[1]
    assert json.loads((out / "tiny_model.json").read_text())["seed"] == 1


def test_missing_tokenizer_path_is_named(tmp_path):
    missing = tmp_path / "nowhere" / "tok.gguf"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        build_tiny_model(tmp_path / "out", missing)
    assert not (tmp_path / "out").exists()


def test_cli_exports_and_builds(smollm2_tokenizer, tmp_path, capsys):
    assert main(["--export-tokenizer", str(tmp_path / "tok"), "--tokenizer", str(smollm2_tokenizer)]) == 0
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    assert main([str(tmp_path / "model"), "--tokenizer", str(tmp_path / "tok"), "--layers", "1"]) == 0
    assert json.loads((tmp_path / "model" / "config.json").read_text())["num_hidden_layers"] == 1
    assert str(tmp_path / "model") in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([])  # neither OUT_DIR nor --export-tokenizer


@pytest.mark.parametrize("architecture,model_type", [("Qwen3-0.6B", "qwen3"), ("Qwen2.5-3B", "qwen2")])
def test_a_random_model_of_a_published_architecture_loads_at_its_real_width(architecture, model_type, tmp_path,
                                                                            smollm2_tokenizer):
    """One layer deep to stay quick on CPU; everything else as published."""
    import torch
    from transformers import AutoModelForCausalLM

    from runkit.tiny_model import ARCHITECTURES, build_random_model

    folder = build_random_model(tmp_path / "m", architecture, smollm2_tokenizer, layers=1)
    model = AutoModelForCausalLM.from_pretrained(folder)
    spec = ARCHITECTURES[architecture]
    assert model.config.model_type == model_type and model.config.num_hidden_layers == 1
    assert model.config.vocab_size == spec["vocab_size"] == 151936
    assert model.config.hidden_size == spec["hidden_size"] and model.dtype == torch.bfloat16
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 151936)
