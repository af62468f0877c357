"""experiments/trainer_speed on CPU: Trinity's trainer worker, built as a launch builds it, runs a step and a weight
sync with the old and the new settings (tests/cpu_trainer.py), and they agree on the log-probs."""

import json
import re
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, smollm2_tokenizer):
    """A 2-layer Qwen2 with grouped-query heads (4 query heads to 2 KV heads) and SmolLM2's tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from runkit.tiny_model import load_tokenizer

    folder = tmp_path_factory.mktemp("tiny-qwen2")
    tokenizer = load_tokenizer(smollm2_tokenizer)
    config = AutoConfig.for_model("qwen2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=len(tokenizer),
                                  tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def runs(tiny_model, tmp_path_factory):
    """The settings in two processes at once, one per set-up (the old hook's patches, the new one's): each spends
    most of its time importing the stack, one core apiece."""
    started = []
    for settings in ("before", "sdpa-blocks,varlen,varlen-128,varlen-ref-cpu,varlen-fsdp1,varlen-lora,varlen-save"):
        work = tmp_path_factory.mktemp("trainer")
        started.append((work / "result.json", subprocess.Popen(
            [sys.executable, "tests/cpu_trainer.py", settings, str(tiny_model), str(work), str(work / "result.json")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    results = {}
    for out, process in started:
        stdout, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, f"{process.args[2]}: {stdout[-2000:]}{stderr[-4000:]}"
        results.update(json.loads(out.read_text()))
    assert sorted(results) == ["before", "sdpa-blocks", "varlen", "varlen-128", "varlen-fsdp1", "varlen-lora",
                               "varlen-ref-cpu", "varlen-save"]
    return results


def test_the_new_setting_runs_packed_with_block_log_probs_and_a_bf16_sync_of_views(runs):
    new = runs["varlen"]
    assert new["attention loaded"] == "rftkit_varlen" and new["padding removal"] is True
    assert new["verl's log-prob fallback"] == "rftkit.trainer.logprobs.token_log_probs"
    assert new["reference weights"].startswith("torch.bfloat16")  # the launcher's dtype
    assert new["reference offloaded to the CPU"] is False  # rftkit.trainer.ref_model keeps it on the GPU
    assert new["weight sync dtypes"] == "torch.bfloat16" and new["weight sync tensors"] > 0
    assert new["weight sync as object-store views"] is True  # through Trinity's real Synchronizer actor
    assert new["attention in the checkpoint config"] is None  # a checkpoint loads without rftkit


def test_the_old_setting_is_what_ran_before(runs):
    old = runs["before"]
    assert old["attention loaded"] == "sdpa" and old["padding removal"] is False
    assert old["verl's log-prob fallback"] == "verl.utils.torch_functional.logprobs_from_logits_v2"
    assert old["reference weights"] == "torch.float32 on cpu" and old["reference offloaded to the CPU"] is True
    assert old["weight sync dtypes"] == "torch.float32" and old["weight sync as object-store views"] is False


def test_packed_and_padded_give_the_same_reference_log_probs(runs):
    from experiments.trainer_speed.report import GAP, LOGPROB_TOLERANCE, add_gaps

    add_gaps(runs)
    packed, old = runs["varlen"][GAP], runs["before"][GAP]
    assert packed["tokens"] > 6 and packed["within"] is True
    assert packed["max"] < 0.01  # bf16 autocast on both sides
    # verl's row-by-row fallback returns bf16 log-probs: near -11, a step of 0.06 nats
    assert old["within"] is None and packed["mean"] < old["mean"] < LOGPROB_TOLERANCE


def test_fsdp1_takes_the_same_step_and_hands_the_engine_the_same_weights(runs):
    """verl's FSDP1 (trainer.trainer_strategy: fsdp) against FSDP2, Trinity's default: the same reference log-probs,
    the same gradients before and after an optimizer step, the reference model kept on the GPU by
    rftkit.trainer.ref_model, and a weight sync whose names and shapes the engine loads as it loads FSDP2's."""
    fsdp1, fsdp2 = runs["varlen-fsdp1"], runs["varlen"]
    assert (fsdp1["FSDP version"], fsdp2["FSDP version"]) == (1, 2)
    assert fsdp1["reference offloaded to the CPU"] is False
    assert fsdp1["reference log-probs of the first step"] == fsdp2["reference log-probs of the first step"]
    # the first step's gradient, and the next one's, after each took its optimizer step on its own kind of weights
    for result in (fsdp1, fsdp2):
        assert result["timed steps"][0]["gradient norm"] != result["warm-up step"]["gradient norm"]
    assert [s["gradient norm"] for s in [fsdp1["warm-up step"], *fsdp1["timed steps"]]] == pytest.approx(
        [s["gradient norm"] for s in [fsdp2["warm-up step"], *fsdp2["timed steps"]]], rel=1e-4)
    assert fsdp1["weight sync names and shapes (sha256)"] == fsdp2["weight sync names and shapes (sha256)"]
    assert fsdp1["weight sync dtypes"] == "torch.bfloat16"


def test_the_gradient_is_the_batchs_however_many_micro_batches_it_is_cut_in(runs):
    """Trinity's loss returns each micro-batch's own mean and verl's engine adds up their gradients;
    rftkit.trainer.loss_scale weighs each by its share of the batch's tokens. So the same batch cut in several
    micro-batches, or left whole, or padded, gives the same gradient, step after step."""
    cut, whole, padded = runs["varlen-128"], runs["varlen"], runs["sdpa-blocks"]
    assert cut["micro-batch token budget"] == 128 and cut["tokens per step"] > 2 * 128  # 3 micro-batches or more
    assert whole["micro-batch token budget"] > whole["tokens per step"]  # one

    def norms(result):
        return [s["gradient norm"] for s in [result["warm-up step"], *result["timed steps"]]]

    assert norms(cut) == pytest.approx(norms(whole), rel=0.02)  # bf16 autocast, other kernels' sums
    assert norms(padded) == pytest.approx(norms(whole), rel=0.02)


def test_a_lora_step_trains_the_adapter_syncs_it_alone_and_resumes_it_from_a_checkpoint(runs):
    """The launcher's LoRA defaults (rftkit.lora) on the trainer's real path: a step trains only the adapter, the
    sync writes the adapter alone where Trinity's engine loads it (rftkit.trainer.lora_saves) with the checkpoint
    monitor told, and a full checkpoint loads into a new worker with the same adapter."""
    lora, full = runs["varlen-lora"], runs["varlen"]
    assert 0 < lora["trainable parameters"] < lora["parameters"] / 10
    assert full["trainable parameters"] == full["parameters"]
    assert lora["reference weights"] == "the actor's, adapter off"
    assert lora["adapter trained (largest |B|)"] > 0  # B starts at zero: a step moved it
    assert lora["weight sync files"] == ["lora_adapter/adapter_config.json", "lora_adapter/adapter_model.safetensors"]
    # the adapter's tensors (16 or 32 bits each) and their index, nothing of the base model
    assert lora["trainable parameters"] * 2 < lora["weight sync bytes"] < lora["trainable parameters"] * 4 + 20_000
    assert lora["weight sync version the monitor recorded"] == "2"
    assert lora["resumed adapter equal"] is True
    # the checkpoint's model shard holds the adapter, not the frozen base the worker loads from the model's folder
    assert lora["full checkpoint model shard bytes"] < lora["trainable parameters"] * 4 + 50_000
    # on the launcher's engine for an adapter (rftkit.lora.fp32_adapter), AdamW steps fp32 weights
    assert lora["FSDP version"] == 1
    assert lora["adapter dtypes"] == ["torch.float32"] and lora["optimizer state dtypes"] == ["torch.float32"]


@pytest.mark.parametrize("setting", ["varlen-save", "varlen-lora"])
def test_the_dry_runs_checkpoint_size_is_what_verl_writes(runs, setting):
    """rftkit.needs.disk's estimate against a checkpoint the trainer saved: the whole model's with its HF copy (the last
    save of a run), and an adapter's."""
    result = runs[setting]
    estimated = result["full checkpoint bytes estimated (rftkit.needs.disk)"]
    assert estimated == pytest.approx(result["full checkpoint bytes"], rel=0.03)


def test_a_step_is_timed_and_counted(runs):
    for result in runs.values():
        assert result["tokens per step"] > 0 and result["update (s)"] > 0 and result["reference log-probs (s)"] > 0
        assert result["trainer tokens/s"] == pytest.approx(result["tokens per step"] / result["trainer step (s)"])


def test_the_printed_line_gives_the_shortest_and_longest_timed_step():
    from experiments.trainer_speed.report import step_spread

    timed = [{"reference log-probs (s)": 0.25, "update (s)": 1.0}, {"reference log-probs (s)": 0.5, "update (s)": 1.5},
             {"reference log-probs (s)": 0.25, "update (s)": 1.25}]
    assert step_spread({"timed steps": timed}) == "1.25 to 2.00 s"


def test_a_profiled_step_says_where_the_host_waited(runs):
    """verl reads its metrics with `.item()` in its update loop: each such wait is counted and named by function."""
    from experiments.trainer_speed.report import profile_table

    for setting, result in runs.items():
        profile = result["profile"]
        assert profile["profiled step (s)"] > 0 and profile["GPU busy share"] is None  # no GPU here
        assert profile["GPU idle by function (ms)"] == {}
        assert profile["waits for the GPU"] >= sum(profile["waits by function"].values()) > 0, setting  # the top ones
        assert any("verl/" in where for where in profile["waits by function"]), profile["waits by function"]
        assert "aten::mm" in profile["host ops by self time (ms)"] or "aten::addmm" in profile[
            "host ops by self time (ms)"]
    table = profile_table({"frozenlake": {"settings": runs}})
    assert len([line for line in table if line.startswith("| frozenlake |")]) == len(runs)


def test_waits_without_a_parent_go_to_the_function_running_when_they_began():
    """On a GPU the runtime's sync calls come without a parent; here real `.item()` waits from a CPU profile are
    cut loose from theirs (as the GPU's come) and must still be named as their parents name them."""
    import copy
    from collections import Counter

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from experiments.trainer_speed.profile import WAITS_ON_CPU, caller, step_frames, waits_by_caller

    def read_loss(x):
        return x.sum().item()

    def read_count(x):
        return int((x > 0).sum().item())

    def step():
        x = torch.randn(64, 64)
        for _ in range(3):
            read_loss(x)
        read_count(x)

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        step()
    events = prof.events()
    waits = [e for e in events if e.name in WAITS_ON_CPU and e.device_type == DeviceType.CPU]
    frames = step_frames(events)
    expected = waits_by_caller(waits, frames)
    assert sorted(expected.values()) == [1, 3] and all(name.endswith(("read_loss", "read_count")) for name in expected)
    assert expected == Counter(caller(w) for w in waits)  # as their parents name them

    orphans = []
    for wait in waits:
        orphan = copy.copy(wait)
        orphan.cpu_parent, orphan.thread = None, -1
        orphans.append(orphan)
    assert waits_by_caller(orphans, frames) == expected
    assert waits_by_caller(orphans, []) == {"unknown": 4}


def test_the_gpu_idle_share_of_a_timed_step_comes_from_the_profiled_steps_gpu_time():
    from experiments.trainer_speed.report import idle_in_timed_steps, profile_table

    timed = [{"reference log-probs (s)": 0.25, "update (s)": 1.0}, {"reference log-probs (s)": 0.5, "update (s)": 1.5}]
    profile = {"profiled step (s)": 3.0, "GPU busy (s)": 1.0, "GPU busy share": 1 / 3, "waits for the GPU": 2,
               "waiting (s)": 0.1, "waits by function": {"verl/x.py(1): f": 2}}
    result = {"timed steps": timed, "profile": profile}
    assert idle_in_timed_steps(result) == "20% to 50%"
    assert idle_in_timed_steps({**result, "timed steps": timed[:1]}) == "20%"
    row = profile_table({"math": {"settings": {"liger": result}}})[-1]
    assert row == "| math | liger | 3.00 | 1.00 s (33%) | 20% to 50% | 2 (0.10 s) | verl/x.py(1): f (2) | - |"
    idle = {"verl/y.py(5): g": 412.4, "verl/z.py(9): h": 3.0}
    row = profile_table({"math": {"settings": {"liger": {**result, "profile": {
        **profile, "GPU idle by function (ms)": idle}}}}})[-1]
    assert row.endswith("| verl/x.py(1): f (2) | verl/y.py(5): g (412); verl/z.py(9): h (3) |")


def test_the_gpu_idle_time_goes_to_the_function_the_host_was_in_meanwhile():
    """A real CPU profile, with its matrix products standing in for the GPU's kernels: the time between them goes
    to what the host ran then, the sleep most of all; time outside the step's Python calls counts for nothing."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    from experiments.trainer_speed.profile import busy_seconds, idle_by_caller, step_frames

    def launch(x):
        for _ in range(4):
            x = x @ x
        return x

    def prepare_on_the_host():
        time.sleep(0.03)

    def step():
        x = torch.eye(256)
        launch(x)
        prepare_on_the_host()
        launch(x)

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        step()
    events = prof.events()
    kernels = [(e.time_range.start, e.time_range.end) for e in events if e.name == "aten::mm"]
    assert len(kernels) == 8
    idle = idle_by_caller(kernels, step_frames(events))
    steps = [e for e in events if e.name.endswith(": step")]
    window = (steps[0].time_range.end - steps[0].time_range.start) / 1e6
    top, seconds = idle.most_common(1)[0]
    assert top.endswith("prepare_on_the_host") and 0.03 <= seconds < window
    # within 15%: on a loaded 2-core machine the profiler's own timestamps drift by milliseconds; what must not
    # happen is a gap of the sleep's size going to no caller, or to two
    assert sum(idle.values()) == pytest.approx(window - busy_seconds(kernels) / 1e6, rel=0.15)
    assert idle_by_caller([], step_frames(events)) == {} and idle_by_caller(kernels, step_frames([])) == {}


def test_report_only_writes_the_table_and_picture_again_from_the_summary(runs, tmp_path, capsys):
    import json

    from experiments.trainer_speed.__main__ import main

    ceiling = {"micro-batch token budget": 4096, "ceiling": {
        "from": "packed (varlen)", "tokens/s": 1000.0, "MFU": 0.1, "forward only (s)": 0.1, "seconds": 0.5,
        "forward only tokens/s": 3000.0, "peak allocated (GiB)": 1.0}}
    summary = {"frozenlake": {"architecture": "tiny", "settings": runs, "ceiling": ceiling,
                              "packing changes nothing": None}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert main(["--report-only", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "summary.md").read_text()
    assert all(f"| frozenlake | {setting} |" in table for setting in runs)
    assert "| frozenlake | ceiling: bare model, packed (varlen) | 4096 |" in table
    assert re.search(r"\| frozenlake \| varlen-lora \|.* \| [\d.]+ \(adapter, 0\.3 MiB\) \|", table)
    first = f"{runs['varlen-128']['warm-up step']['gradient norm']:.4g}"  # the last column, for every setting
    assert re.search(rf"^\| frozenlake \| varlen-128 \|.* \| {re.escape(first)} \|$", table, re.M)
    assert (tmp_path / "trainer_speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert table in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--report-only", "--out", str(tmp_path / "elsewhere")])
    assert "no summary.json there" in capsys.readouterr().err


def test_busy_time_counts_overlapping_kernels_once():
    from experiments.trainer_speed.profile import busy_seconds

    assert busy_seconds([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    assert busy_seconds([]) == 0


def test_the_reference_model_on_the_gpu_or_not_gives_the_same_log_probs(runs):
    """rftkit.trainer.ref_model changes where the reference weights live, not what they compute; its config key
    (the reference model's param_offload) gives verl's placement back."""
    on_gpu, offloaded = runs["varlen"], runs["varlen-ref-cpu"]
    assert offloaded["reference offloaded to the CPU"] is True and on_gpu["reference offloaded to the CPU"] is False
    assert on_gpu["reference log-probs of the first step"] == offloaded["reference log-probs of the first step"]


@pytest.mark.parametrize("example,setting,liger,checkpointing,fused", [
    ("frozenlake", "varlen", False, True, None), ("frozenlake", "liger", True, True, None),
    ("frozenlake", "varlen-no-ckpt", False, False, None), ("frozenlake", "liger-no-ckpt", True, False, None),
    ("frozenlake", "liger-fused", True, True, "triton"),
    # the math YAML asks for the fused kernel: a setting without it still runs without it
    ("math", "liger", True, True, None), ("math", "liger-fused", True, True, "triton"),
    ("math", "liger-fused-no-ckpt", True, False, "triton"),
    ("math", "fused-compile", False, True, "triton")])
def test_the_trainer_levers_reach_verls_model_config(example, setting, liger, checkpointing, fused, tiny_model,
                                                     tmp_path):
    from trinity.trainer.verl.config import build_verl_config

    from experiments.trainer_speed.settings import trinity_config

    verl_config = build_verl_config(trinity_config(example, tiny_model, tmp_path, setting))
    model = verl_config.model
    assert (model.get("use_liger", False), model.enable_gradient_checkpointing) == (liger, checkpointing)
    assert model.get("use_fused_kernels", False) == (fused is not None)
    if fused:  # (the YAML's backend may stay behind a switch that is off)
        assert (model.get("fused_kernel_options") or {}).get("impl_backend") == fused


STRATEGY_KEYS = ("actor.strategy", "actor.fsdp_config.strategy", "ref.strategy", "ref.fsdp_config.strategy",
                  "critic.strategy", "critic.fsdp.strategy")  # where Trinity-RFT 0.6.0 puts trainer_strategy


@pytest.mark.parametrize("example,setting,default,keys,value,default_value", [
    ("math", "liger-fused-no-reshard", "liger-fused", ["actor.fsdp_config.reshard_after_forward"], False, True),
    ("frozenlake", "liger-no-reshard", "liger", ["actor.fsdp_config.reshard_after_forward"], False, True),
    ("math", "liger-fused-adamw", "liger-fused", ["actor.optim.override_optimizer_config"], {"fused": True}, None),
    ("math", "liger-fused-fsdp1", "liger-fused", STRATEGY_KEYS, "fsdp", "fsdp2"),
    ("frozenlake", "liger-fsdp1", "liger", STRATEGY_KEYS, "fsdp", "fsdp2"),
    ("frozenlake", "varlen-fsdp1", "varlen", STRATEGY_KEYS, "fsdp", "fsdp2")])
def test_a_host_lever_reaches_its_verl_keys_and_nothing_else(example, setting, default, keys, value, default_value,
                                                             tiny_model, tmp_path):
    """Each host lever is its default with one thing of verl's config changed, in every place verl reads it."""
    from omegaconf import OmegaConf
    from trinity.trainer.verl.config import build_verl_config

    from experiments.trainer_speed.settings import trinity_config

    built = {s: build_verl_config(trinity_config(example, tiny_model, tmp_path, s)) for s in (setting, default)}
    for key in keys:
        assert OmegaConf.select(built[setting], key) == value
        assert OmegaConf.select(built[default], key) == default_value
        OmegaConf.update(built[setting], key, default_value, merge=False)
    assert built[setting] == built[default]  # the reference model's keys, liger's and the fused kernel's included


@pytest.mark.parametrize("example,setting,tokens", [
    # the math configs' budget stands only with the fused kernel; without it, what the logits held whole allow
    ("math", "liger-fused", 49152), ("math", "liger", 24576), ("math", "varlen", 24576), ("math", "liger-48k", 49152),
    ("math", "sdpa-blocks", 12288), ("frozenlake", "liger", 25600), ("frozenlake", "sdpa-blocks", 4096)])
def test_each_setting_reaches_verls_micro_batches_with_its_budget(example, setting, tokens, tiny_model, tmp_path):
    from trinity.trainer.verl.config import build_verl_config

    from experiments.trainer_speed.settings import trinity_config

    actor = build_verl_config(trinity_config(example, tiny_model, tmp_path, setting)).actor
    assert actor.ppo_max_token_len_per_gpu == tokens


def test_the_ceiling_tries_the_largest_budget_then_the_one_its_logits_fit():
    from experiments.trainer_speed.__main__ import ceiling_budgets

    assert ceiling_budgets("math", ["sdpa-blocks", "liger"]) == [24576]
    assert ceiling_budgets("math", ["liger", "liger-fused"]) == [49152, 24576]
    assert ceiling_budgets("frozenlake", ["sdpa-blocks", "liger"]) == [25600]


def test_a_ceiling_pass_the_gpu_cannot_hold_reads_out_of_memory_and_the_ceiling_comes_from_the_others():
    import torch

    from experiments.trainer_speed.ceiling import fastest, if_it_fits

    def too_big(attn):
        raise torch.cuda.OutOfMemoryError(f"CUDA out of memory ({attn})")

    result = {"packed (varlen)": {"tokens/s": 30000.0, "seconds": 1.4},
              "padded (sdpa)": if_it_fits(too_big, "sdpa")}
    assert result["padded (sdpa)"] == {"error": "out of memory"}
    assert fastest(result, ("packed (varlen)", "padded (sdpa)")) == {"from": "packed (varlen)", "tokens/s": 30000.0,
                                                                     "seconds": 1.4}
    assert if_it_fits(lambda attn: {"tokens/s": 40000.0}, "sdpa") == {"tokens/s": 40000.0}
    result["padded (sdpa)"] = {"tokens/s": 40000.0}
    assert fastest(result, ("packed (varlen)", "padded (sdpa)"))["from"] == "padded (sdpa)"
