"""experiments/serve_startup.py: each variant's server gets its caches and flags, and the report reads vLLM's log."""

import argparse
import contextlib
import json

import pytest

from experiments import serve_startup as bench
from runkit.steps import Step

from conftest import config_only_model

# The lines vLLM 0.23 writes while it starts, in its own words.
VLLM_LOG = """\
(EngineCore_DP0 pid=1) INFO [backends.py:215] Compiling a graph for dynamic shape takes 17.41 s
(EngineCore_DP0 pid=1) INFO [monitor.py:34] torch.compile took {compile} s in total
(EngineCore_DP0 pid=1) INFO [gpu_model_runner.py:3480] Graph capturing finished in 3 secs, took 0.44 GiB
(EngineCore_DP0 pid=1) INFO [core.py:210] init engine (profile, create kv cache, warmup model) took {init} seconds
"""


def test_the_variants_get_their_caches_flags_and_figures(tmp_path, monkeypatch):
    """main() over two variants, with `vllm serve` replaced by a fixture that writes vLLM's start-up lines
    and the evaluation by a recorded report: the benchmark's own work is what is checked."""
    model = config_only_model(tmp_path / "model")
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.parquet").write_bytes(b"")
    served = []

    @contextlib.contextmanager
    def fixture_server(weights, tokenizer, log_file, max_model_len, flags, env):
        served.append((flags, env))
        eager = "--enforce-eager" in flags
        log_file.write_text(VLLM_LOG.format(compile=0 if eager else 20.2, init=4.1 if eager else 34.0))
        yield "http://127.0.0.1:1/v1"

    def recorded_evaluation(command, log_file, **kw):
        out = command[command.index("--out") + 1]
        (tmp_path / out).mkdir(parents=True)
        (tmp_path / out / "report.json").write_text(json.dumps({"episodes": 200}))
        return Step(0, 40.0)

    monkeypatch.setattr(bench, "vllm_server", fixture_server)
    monkeypatch.setattr(bench, "run_step", recorded_evaluation)
    monkeypatch.setattr(bench, "require_cuda", lambda what: None)  # the fixtures stand in for the GPU
    monkeypatch.setattr(bench, "engine_flags", lambda config, model: ["--enable-auto-tool-choice"])
    out = tmp_path / "out"
    warm = f"VLLM_CACHE_ROOT={out}/cold/cache/vllm"
    assert bench.main([str(model), "--out", str(out), "--data", str(data),
                       "--variant", "cold", "--variant", f"warm={warm},--enforce-eager"]) == 0

    (cold_flags, cold_env), (warm_flags, warm_env) = served
    assert cold_flags == ["--enable-auto-tool-choice"]
    assert warm_flags == ["--enable-auto-tool-choice", "--enforce-eager"]
    assert cold_env["VLLM_CACHE_ROOT"] == str(out / "cold" / "cache" / "vllm")  # empty caches of its own
    assert warm_env["VLLM_CACHE_ROOT"] == str(out / "cold" / "cache" / "vllm")  # the one it names
    assert warm_env["TORCHINDUCTOR_CACHE_DIR"] == str(out / "warm" / "cache" / "inductor")
    text = (out / "serve_startup.md").read_text()
    assert "| of which engine init (vLLM's log) | 34.0 | 4.1 |" in text.replace("|   of", "| of")
    assert "torch.compile (vLLM's log) | 20.2 | 0.0 |" in text
    assert "| episodes per second | 5.00 | 5.00 |" in text
    assert "| server flags | - | --enforce-eager |" in text
    assert (out / "serve_startup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --report-only redraws the same table from the variants' serve.json
    assert bench.main(["--out", str(out), "--report-only", "--variant", "cold", "--variant", "warm"]) == 0
    assert (out / "serve_startup.md").read_text() == text


def test_an_out_under_a_file_is_refused_before_the_model_is_converted(tmp_path, monkeypatch, capsys):
    model = config_only_model(tmp_path / "model")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.parquet").write_bytes(b"")
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(bench, "require_cuda", lambda what: None)
    monkeypatch.setattr(bench, "model_folder", lambda *a: pytest.fail("the model was converted"))
    with pytest.raises(SystemExit) as stop:
        bench.main([str(model), "--out", str(tmp_path / "file" / "out"), "--data", str(tmp_path / "data"),
                    "--variant", "cold"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (f"error: --out {tmp_path}/file/out: cannot write there, "
                                       f"{tmp_path}/file is not a folder\n")


@pytest.mark.parametrize("text,expected", [
    ("cold", ("cold", {}, [])),
    ("eager=--enforce-eager,VLLM_CACHE_ROOT=/c", ("eager", {"VLLM_CACHE_ROOT": "/c"}, ["--enforce-eager"])),
    ("graphs=--compilation-config={\"mode\":0}", ("graphs", {}, ['--compilation-config={"mode":0}']))])
def test_variants_are_a_name_environment_variables_and_flags(text, expected):
    assert bench.parse_variant(text) == expected


@pytest.mark.parametrize("text", ["=x", "a/b", "x=lower=1", "x=NOVALUE="])
def test_a_malformed_variant_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_variant(text)


def test_a_missing_variant_is_named(tmp_path):
    with pytest.raises(SystemExit, match="cold/serve.json: missing"):
        bench.report(tmp_path, ["cold"])
