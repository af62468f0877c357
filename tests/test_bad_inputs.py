"""Every entry point answers bad input with exit status 2 and one message naming what is wrong, and writes nothing.

Each case runs a script as a user would, in a scratch folder (so relative
defaults such as ./checkpoints land there too), and compares that folder
before and after.
"""

import os
import struct
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import launches
from conftest import REPO

FROZENLAKE = {"seed": [1], "size": [3], "p": [0.8]}  # one task row of each example
MATH = {"question": ["What is 1 + 1?"], "answer": ["#### 2"]}
GURU = {"prompt": [[{"role": "user", "content": "What is 1 + 1?"}]], "reward_model": [{"ground_truth": "2"}],
        "qwen2.5_7b_pass_rate": [0.5], "qwen3_30b_pass_rate": [0.9]}


def parquet(path, columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def text(path, content="this is not a parquet file\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def splits(folder, train, test=FROZENLAKE):
    """A data folder with a train and a test split; a split given as None is a text file instead."""
    for name, columns in (("train", train), ("test", test)):
        if columns is None:
            text(folder / f"{name}.parquet")
        else:
            parquet(folder / f"{name}.parquet", columns)


def nothing(tmp):
    pass


def no_rows(columns):
    return {name: pa.array([], type=pa.array(values).type) for name, values in columns.items()}


# Good data in every scratch folder (good_data), so that each case fails on its own bad input; a case's
# own --data-dir, --train-dir or --eval-dir comes later and wins.
FROZENLAKE_MAIN = ["frozenlake/main.py", "--dry-run", "--gpus", "2", "--data-dir", "{tmp}/fl"]
MATH_MAIN = ["math_bots/main.py", "--dry-run", "--gpus", "2",
             "--train-dir", "{tmp}/m/train", "--eval-dir", "{tmp}/m/aime"]
EVALUATE = ["scripts/evaluate.py", "--task", "frozenlake", "--model", "oracle", "--out", "{tmp}/out"]
PREPARE_MATH = ["scripts/prepare_math_data.py", "--processed_data_dir", "{tmp}/train", "--aime_dir", "{tmp}/aime"]
DIFFICULTY = str(REPO / "configs" / "frozenlake_difficulty.yaml")
FROZENLAKE_YAML = (REPO / "configs" / "frozenlake.yaml").read_text()

# (id, files to make in the scratch folder, command, what stderr must say); {tmp} is the scratch folder.
CASES = [
    # the training entry points: the YAML, its keys, the paths it names, the data
    ("yaml-does-not-parse", lambda t: text(t / "c.yaml", "model: [unclosed\n"),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"], "error: --config {tmp}/c.yaml: not valid YAML at line 2"),
    ("yaml-not-a-mapping", lambda t: text(t / "c.yaml", "- a\n- b\n"),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"], "error: --config {tmp}/c.yaml: expected a YAML mapping"),
    ("yaml-not-a-trinity-config", lambda t: text(t / "c.yaml", "name: x\n"),
     [*MATH_MAIN, "--config", "{tmp}/c.yaml"], "error: {tmp}/c.yaml: no key model.model_path"),
    ("yaml-env-variable-unset", lambda t: text(t / "c.yaml", "model:\n  model_path: ${oc.env:RFTKIT_NO_SUCH_VAR}\n"),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"],
     "error: --config {tmp}/c.yaml: model.model_path: Environment variable 'RFTKIT_NO_SUCH_VAR' not found"),
    ("set-env-variable-unset", nothing, [*FROZENLAKE_MAIN, "--set", "name=${{oc.env:RFTKIT_NO_SUCH_VAR}}"],
     "error: --set name: Environment variable 'RFTKIT_NO_SUCH_VAR' not found"),
    ("data-dir-missing", nothing, [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/frozenlak"],
     "error: {tmp}/frozenlak: no such folder (the training taskset frozenlake_train, split 'train'; --data-dir sets"),
    ("set-key-typo", nothing, [*FROZENLAKE_MAIN, "--set", "nmae=x"],
     "error: --set nmae: Trinity-RFT's config has no key nmae (nearest: name)"),
    ("set-nested-key-typo", nothing, [*FROZENLAKE_MAIN, "--set", "trainer.grad_clipp=1"],
     "error: --set trainer.grad_clipp: Trinity-RFT's config has no key trainer.grad_clipp "
     "(nearest: trainer.grad_clip)"),
    ("set-key-typo-in-a-list-item", nothing, [*MATH_MAIN, "--set", "buffer.explorer_input.eval_tasksets.0.nmae=x"],
     "error: --set buffer.explorer_input.eval_tasksets.0.nmae: Trinity-RFT's config has no key "
     "buffer.explorer_input.eval_tasksets.0.nmae (nearest: buffer.explorer_input.eval_tasksets.0.name)"),
    ("key-trinity-rejects", lambda t: text(t / "c.yaml", FROZENLAKE_YAML.replace("  grad_clip:", "  grad_clipp:")),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"],
     "error: {tmp}/c.yaml: trainer.grad_clipp: Invalid configuration: Key 'grad_clipp' not in 'TrainerConfig'"),
    ("value-trinity-rejects-type", nothing, [*FROZENLAKE_MAIN, "--set", "buffer.batch_size=many"],
     "error: --set buffer.batch_size=many: buffer.batch_size: Invalid configuration: "
     "Value 'many' of type 'str' could not be converted to Integer"),
    ("value-trinity-rejects", nothing, [*MATH_MAIN, "--set", "algorithm.algorithm_type=no_such_algorithm"],
     "error: --set algorithm.algorithm_type=no_such_algorithm: Invalid module key: no_such_algorithm"),
    ("file-value-trinity-rejects",  # the same value from the file is the file's
     lambda t: text(t / "c.yaml", FROZENLAKE_YAML.replace("algorithm_type: multi_step_grpo", "algorithm_type: grpoo")),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"], "error: {tmp}/c.yaml: Invalid module key: grpoo"),
    ("yaml-section-not-a-mapping",  # the file's buffer section moved below a key of its own, buffer a number
     lambda t: text(t / "c.yaml", FROZENLAKE_YAML.replace("\nbuffer:", "\nbuffer: 3\nx:")),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"],
     "error: --config {tmp}/c.yaml: buffer: expected a mapping of settings, got 3"),
    ("set-section-not-a-mapping", nothing, [*FROZENLAKE_MAIN, "--set", "buffer=3"],
     "error: --set buffer: expected a mapping of settings, got 3"),
    ("set-list-not-a-list", nothing,
     [*MATH_MAIN, "--set", "buffer.explorer_input.taskset.data_selector.feature_keys=qwen3_30b_pass_rate"],
     "error: --set buffer.explorer_input.taskset.data_selector.feature_keys: expected a list, "
     "got 'qwen3_30b_pass_rate'"),
    ("set-count-below-one", nothing, [*FROZENLAKE_MAIN, "--set", "buffer.batch_size=-4"],
     "error: --set buffer.batch_size: expected 1 or more, got -4"),
    ("set-without-value", nothing, [*FROZENLAKE_MAIN, "--set", "buffer.batch_size"],
     "error: --set: expected KEY=VALUE, got 'buffer.batch_size'"),
    ("set-key-with-no-place", nothing, [*FROZENLAKE_MAIN, "--set", "buffer.explorer_input.eval_tasksets.5.name=x"],
     "error: --set buffer.explorer_input.eval_tasksets.5.name: the config's buffer.explorer_input.eval_tasksets "
     "is a list of 1, items 0 to 0"),
    ("model-path-missing", nothing, [*FROZENLAKE_MAIN, "--model-path", "./models/qwen"],
     "error: model.model_path (--model-path) {tmp}/models/qwen: no such folder"),
    ("model-path-not-a-hub-id", nothing, [*MATH_MAIN, "--model-path", "models/qwen/final"],
     "error: model.model_path (--model-path) models/qwen/final: no such folder"),
    ("model-path-without-a-config", lambda t: (t / "empty-model").mkdir(), [*FROZENLAKE_MAIN, "--model-path",
                                                                           "{tmp}/empty-model"],
     "error: model.model_path (--model-path) {tmp}/empty-model: no config.json in this folder"),
    ("checkpoint-dir-under-a-file", lambda t: text(t / "file"),
     [*FROZENLAKE_MAIN, "--checkpoint-dir", "{tmp}/file/ckpt"],
     "error: checkpoint_root_dir (--checkpoint-dir) {tmp}/file/ckpt: cannot write there, {tmp}/file is not a folder"),
    ("train-split-not-parquet", lambda t: splits(t / "d", None),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"], "error: {tmp}/d/train.parquet: not a parquet file ("),
    ("train-split-missing-a-column", lambda t: splits(t / "d", {"seed": [1], "p": [0.8]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/train.parquet: column 'size' is missing (expected columns seed, size, p); regenerate it"),
    ("train-split-column-of-wrong-type", lambda t: splits(t / "d", {**FROZENLAKE, "p": ["0.8"]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/train.parquet: column 'p' has type string, expected a number"),
    ("test-split-with-a-null",
     lambda t: splits(t / "d", FROZENLAKE, {"seed": [1, None], "size": [3, 3], "p": [0.8, 0.8]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/test.parquet: column 'seed' is empty (null) in row 1; every task needs a value"),
    ("train-split-map-too-large",
     lambda t: splits(t / "d", {"seed": [1, 2, 3], "size": [3, 100000, 64], "p": [0.8, 0.8, 0.8]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/train.parquet: column 'size' is 100000 in row 1 and outside its range in 1 more rows; "
     "expected 2 to 32; regenerate it"),
    ("test-split-p-not-a-probability", lambda t: splits(t / "d", FROZENLAKE, {**FROZENLAKE, "p": [float("nan")]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/test.parquet: column 'p' is nan in row 0; expected 0.0 to 1.0"),
    ("evaluate-seed-negative", lambda t: splits(t / "d", FROZENLAKE, {**FROZENLAKE, "seed": [-3]}),
     [*EVALUATE, "--data", "{tmp}/d"],
     "error: --data {tmp}/d/test.parquet: column 'seed' is -3 in row 0; expected 0 or more"),
    ("math-bots-with-one-feature", nothing,
     [*MATH_MAIN, "--set", "buffer.explorer_input.taskset.data_selector.feature_keys=[qwen3_30b_pass_rate]"],
     "error: buffer.explorer_input.taskset.data_selector.feature_keys: difficulty_based_resumable (BOTS) reads two "
     "pass-rate columns, the weaker reference's first; got ['qwen3_30b_pass_rate']"),
    ("math-pass-rates-in-percent",  # BOTS reads them as chances, 0 to 1
     lambda t: parquet(t / "train" / "train.parquet",
                       {**MATH, "qwen2.5_7b_pass_rate": [50.0], "qwen3_30b_pass_rate": [0.9]}),
     [*MATH_MAIN, "--train-dir", "{tmp}/train"],
     "error: {tmp}/train/train.parquet: column 'qwen2.5_7b_pass_rate' is 50.0 in row 0; expected 0.0 to 1.0"),
    ("test-split-empty", lambda t: splits(t / "d", FROZENLAKE, no_rows(FROZENLAKE)),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"], "error: {tmp}/d/test.parquet: no rows"),
    ("train-split-without-selector-features", lambda t: splits(t / "d", FROZENLAKE),
     [*FROZENLAKE_MAIN, "--config", DIFFICULTY, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/train.parquet: column 'random_pass_rate' is missing"),
    ("math-train-without-pass-rates", lambda t: parquet(t / "train" / "train.parquet", MATH),
     [*MATH_MAIN, "--train-dir", "{tmp}/train"],
     "error: {tmp}/train/train.parquet: column 'qwen2.5_7b_pass_rate' is missing"),
    ("math-train-with-other-pass-rates",  # the hint names this split's columns, the weaker one first
     lambda t: parquet(t / "train" / "train.parquet", {**MATH, "strong_pass_rate": [0.9], "weak_pass_rate": [0.1]}),
     [*MATH_MAIN, "--train-dir", "{tmp}/train"],
     "column 'qwen2.5_7b_pass_rate' is missing (expected columns question, answer, qwen2.5_7b_pass_rate, "
     "qwen3_30b_pass_rate); this split has weak_pass_rate, strong_pass_rate: name them, weakest first, with "
     "--set buffer.explorer_input.taskset.data_selector.feature_keys=[weak_pass_rate,strong_pass_rate]"),
    ("math-eval-question-not-text", lambda t: parquet(t / "aime" / "test.parquet", {**MATH, "question": [7]}),
     [*MATH_MAIN, "--eval-dir", "{tmp}/aime"],
     "error: {tmp}/aime/test.parquet: column 'question' has type int64, expected a string; run scripts/prepare"),
    # the data scripts
    ("frozenlake-data-dir-under-a-file", lambda t: text(t / "file"),
     ["scripts/get_frozenlake_data.py", "--local_dir", "{tmp}/file/fl"],
     "error: --local_dir {tmp}/file/fl: cannot write there, {tmp}/file is not a folder"),
    ("frozenlake-maps-too-large", nothing, ["scripts/get_frozenlake_data.py", "--map_max_size", "100000",
                                            "--local_dir", "{tmp}/new"],
     "error: --map_max_size: must be 2 (a map needs S and G) to 32 (the map must fit the prompt of each move), "
     "got 100000"),
    ("math-input-not-parquet", lambda t: text(t / "guru.parquet"),
     [*PREPARE_MATH, "--input", "{tmp}/guru.parquet"], "error: --input {tmp}/guru.parquet: not a parquet file ("),
    ("math-input-prompt-not-a-list", lambda t: parquet(t / "guru.parquet", {**GURU, "prompt": ["What?"]}),
     [*PREPARE_MATH, "--input", "{tmp}/guru.parquet"],
     "error: --input {tmp}/guru.parquet: column 'prompt' has type string, expected a list"),
    ("math-input-no-rows", lambda t: parquet(t / "guru.parquet", no_rows(GURU)),
     [*PREPARE_MATH, "--input", "{tmp}/guru.parquet"], "error: --input {tmp}/guru.parquet: no rows"),
    ("math-input-jsonl-empty", lambda t: text(t / "guru.jsonl", ""),
     [*PREPARE_MATH, "--input", "{tmp}/guru.jsonl"], "error: --input {tmp}/guru.jsonl: no rows"),
    ("math-input-rows-of-another-shape",
     lambda t: parquet(t / "guru.parquet", {**GURU, "reward_model": [{"style": "rule"}]}),
     [*PREPARE_MATH, "--input", "{tmp}/guru.parquet"],
     "error: --input {tmp}/guru.parquet: rows not shaped as guru-RL-92k's ("),
    ("math-aime-input-not-parquet", lambda t: (parquet(t / "guru.parquet", GURU), text(t / "aime.parquet")),
     [*PREPARE_MATH, "--input", "{tmp}/guru.parquet", "--aime_input", "{tmp}/aime.parquet"],
     "error: --aime_input {tmp}/aime.parquet: not a parquet file ("),
    ("math-output-under-a-file", lambda t: (parquet(t / "guru.parquet", GURU), text(t / "file")),
     ["scripts/prepare_math_data.py", "--input", "{tmp}/guru.parquet", "--processed_data_dir", "{tmp}/file/train"],
     "error: --processed_data_dir {tmp}/file/train: cannot write there"),
    # evaluation and plots
    ("evaluate-data-not-parquet", lambda t: splits(t / "d", FROZENLAKE, None),
     [*EVALUATE, "--data", "{tmp}/d"], "error: --data {tmp}/d/test.parquet: not a parquet file ("),
    ("evaluate-data-missing-a-column", lambda t: splits(t / "d", FROZENLAKE, {"seed": [1], "size": [3]}),
     [*EVALUATE, "--data", "{tmp}/d"], "error: --data {tmp}/d/test.parquet: column 'p' is missing"),
    ("evaluate-split-a-folder", lambda t: (t / "d" / "test.parquet").mkdir(parents=True),
     [*EVALUATE, "--data", "{tmp}/d"], "error: --data {tmp}/d/test.parquet: a folder, expected a parquet file"),
    ("evaluate-split-empty", lambda t: splits(t / "d", FROZENLAKE, no_rows(FROZENLAKE)),
     [*EVALUATE, "--data", "{tmp}/d"], "error: --data {tmp}/d/test.parquet: no rows"),
    ("evaluate-base-url-not-a-url", nothing,
     ["scripts/evaluate.py", "--task", "math", "--model", "openai", "--base-url", "localhost:8000", "--model-name",
      "m", "--data", "{tmp}/m/aime", "--split", "test", "--out", "{tmp}/out"],
     "error: --base-url 'localhost:8000': expected an http:// or https:// address"),
    ("evaluate-gguf-not-a-gguf", lambda t: text(t / "model.bin"),
     [*EVALUATE[:4], "local", "--gguf", "{tmp}/model.bin", "--out", "{tmp}/out"],
     "error: --gguf {tmp}/model.bin: expected a .gguf file"),
    ("evaluate-out-under-a-file", lambda t: (splits(t / "d", FROZENLAKE), text(t / "file")),
     ["scripts/evaluate.py", "--task", "frozenlake", "--model", "oracle", "--data", "{tmp}/d",
      "--out", "{tmp}/file/out"], "error: --out {tmp}/file/out: cannot write there, {tmp}/file is not a folder"),
    ("plot-out-under-a-file", lambda t: text(t / "file"),
     ["scripts/plot_runs.py", "{tmp}/run", "--out", "{tmp}/file/runs.png"],
     "error: --out {tmp}/file: cannot write there, {tmp}/file is not a folder"),
    ("plot-run-without-scalars", lambda t: text(t / "run" / "events.out.tfevents.1.host", "cut short"),
     ["scripts/plot_runs.py", "{tmp}/run", "--out", "{tmp}/runs.png"],
     "error: RUN {tmp}/run: its event files hold no scalars (empty, cut short or not tensorboard's)"),
    ("plot-out-not-a-png", nothing, ["scripts/plot_runs.py", "{tmp}/run", "--out", "{tmp}/runs.txt"],
     "error: --out {tmp}/runs.txt: expected a name ending in .png"),
    ("plot-run-missing", nothing, ["scripts/plot_runs.py", "{tmp}/no-run", "--out", "{tmp}/runs.png"],
     "error: RUN {tmp}/no-run: no such folder"),
    ("evaluate-gguf-missing", nothing, [*EVALUATE[:4], "local", "--gguf", "{tmp}/nope.gguf", "--out", "{tmp}/out"],
     "error: --gguf {tmp}/nope.gguf: no such file"),
    ("evaluate-default-data-missing", nothing,
     ["scripts/evaluate.py", "--task", "math", "--model", "local", "--out", "{tmp}/out"],
     "error: --data {repo}/data/math_bots/aime24/test.parquet: no such file (--task math's default; --data gives "
     "another folder); run scripts/prepare_math_data.py first, or, offline, give --data "
     "math_bots/tasksets/gsm_symbolic"),
    ("evaluate-gguf-of-random-bytes", lambda t: (t / "model.gguf").write_bytes(os.urandom(4096)),
     [*EVALUATE[:4], "local", "--gguf", "{tmp}/model.gguf", "--out", "{tmp}/out"],
     "error: --gguf {tmp}/model.gguf: not a GGUF model the gguf reader can read (ValueError: GGUF magic invalid)"),
    ("evaluate-gguf-header-then-garbage",  # GGUF v3, 5 tensors, 2 metadata entries, then noise
     lambda t: (t / "model.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 5, 2) + os.urandom(4096)),
     [*EVALUATE[:4], "local", "--gguf", "{tmp}/model.gguf", "--out", "{tmp}/out"],
     "error: --gguf {tmp}/model.gguf: not a GGUF model the gguf reader can read ("),
    ("model-config-not-json", lambda t: text(t / "base" / "config.json", "{architectures: [Qwen2"),
     ["scripts/merge_lora.py", "{tmp}/base", "{tmp}/adapter", "--out", "{tmp}/merged"],
     "error: BASE {tmp}/base/config.json: not JSON at line 1"),
    ("model-weights-index-names-a-missing-shard",
     lambda t: (text(t / "base" / "config.json", '{"model_type": "qwen2"}'),
                text(t / "base" / "model.safetensors.index.json",
                     '{"weight_map": {"w": "model-00001-of-00002.safetensors"}}')),
     ["scripts/merge_lora.py", "{tmp}/base", "{tmp}/adapter", "--out", "{tmp}/merged"],
     "error: BASE {tmp}/base: model-00001-of-00002.safetensors is missing (1 of the 1 weight files its "
     "model.safetensors.index.json names)"),
    ("evaluate-out-where-nothing-can-be-written", nothing, [*EVALUATE[:-1], "/sys/kernel/rftkit-out"],
     "error: --out /sys/kernel/rftkit-out: cannot write there, /sys/kernel is not writable"),
    ("evaluate-split-missing", nothing, [*EVALUATE, "--data", "{tmp}/fl", "--split", "tset"],
     "error: --split tset: no tset.parquet in {tmp}/fl (its splits: test, train)"),
    ("temperature-below-zero", nothing, [*FROZENLAKE_MAIN, "--set", "model.temperature=-1"],
     "error: --set model.temperature: expected 0 or more, got -1"),
    ("bots-kwarg-of-the-wrong-kind", nothing,
     [*MATH_MAIN, "--set", "buffer.explorer_input.taskset.data_selector.kwargs.m=abc"],
     "error: buffer.explorer_input.taskset.data_selector.kwargs.m: expected a whole number of 1 or more, got 'abc'"),
    ("bots-kwarg-out-of-range", nothing,
     [*MATH_MAIN, "--set", "buffer.explorer_input.taskset.data_selector.kwargs.target_reward=80"],
     "error: buffer.explorer_input.taskset.data_selector.kwargs.target_reward: expected a number from 0 to 1, got 80"),
    ("bots-kwarg-misspelled", nothing,
     [*MATH_MAIN, "--set", "buffer.explorer_input.taskset.data_selector.kwargs.lamda=0.1"],
     "error: buffer.explorer_input.taskset.data_selector.kwargs.lamda: not a setting of the "
     "difficulty_based_resumable selector (it reads adaptive_rho, do_sample, lamb, m, rho, target_reward, tau); "
     "did you mean lamb?"),
    ("kwargs-for-a-selector-that-reads-none", nothing,
     [*FROZENLAKE_MAIN, "--set", "buffer.explorer_input.taskset.task_selector.kwargs.m=8"],
     "error: buffer.explorer_input.taskset.task_selector.kwargs.m: not a setting of the sequential selector (it "
     "reads none)"),
    ("selector-typo", nothing,
     [*FROZENLAKE_MAIN, "--set", "buffer.explorer_input.taskset.task_selector.selector_type=randm"],
     "error: --set buffer.explorer_input.taskset.task_selector.selector_type=randm: Invalid module key: randm; did "
     "you mean random? Trinity's selectors: difficulty_based, difficulty_based_resumable, offline_easy2hard, "
     "random, sequential, shuffle"),
    ("selector-unknown-with-bots-settings", nothing,
     [*MATH_MAIN, "--set", "buffer.explorer_input.taskset.data_selector.selector_type=bogus"],
     "error: --set buffer.explorer_input.taskset.data_selector.selector_type=bogus: Invalid module key: bogus; "
     "Trinity's selectors: difficulty_based, difficulty_based_resumable, offline_easy2hard, random, sequential, "
     "shuffle"),
    ("operator-unknown", nothing,
     [*MATH_MAIN, "--set", "data_processor.experience_pipeline.operators=[{{name: pass_rate_calc}}]"],
     "error: --set data_processor.experience_pipeline.operators=[{{'name': 'pass_rate_calc'}}]: Invalid module key: "
     "pass_rate_calc; did you mean pass_rate_calculator? Trinity's experience_operators: dapo_dynamic_sampling, "),
    ("workflow-type-tune-replaces", nothing,
     [*FROZENLAKE_MAIN, "--set", "buffer.explorer_input.default_workflow_type=frozen_lake_workflow"],
     "error: --set buffer.explorer_input.default_workflow_type: tune() sets the workflow type itself (to its "
     "adapter, which runs the example's workflow function), so a value here is never used"),
    ("workflow-args-tune-never-hands-on", nothing,
     [*FROZENLAKE_MAIN, "--set", "buffer.explorer_input.taskset.workflow_args.agent_max_steps=5"],
     "error: --set buffer.explorer_input.taskset.workflow_args: tune() hands the workflow function a task's row and "
     "the model, not these (agent_max_steps), so they are never used; an episode's settings go in the task rows"),
    ("over-rollout-ratio-negative", nothing, [*FROZENLAKE_MAIN, "--set", "explorer.over_rollout.ratio=-0.5"],
     "error: --set explorer.over_rollout.ratio: expected 0 or more, got -0.5"),
    ("over-rollout-ratio-one", nothing, [*FROZENLAKE_MAIN, "--set", "explorer.over_rollout.ratio=1.0"],
     "error: --set explorer.over_rollout.ratio=1.0: over_rollout_ratio should be in [0.0, 1.0)"),
    ("group-of-one-always-skipped", nothing, [*FROZENLAKE_MAIN, "--set", "algorithm.repeat_times=1"],
     "error: --set algorithm.repeat_times: 1 rollout a task, and algorithm.advantage_fn_args.std_threshold is set "
     "(0.0001): every group of one is skipped, so the trainer would never get an experience; expected 2 or more"),
    ("model-len-below-prompt-and-response", nothing, [*FROZENLAKE_MAIN, "--set", "model.max_model_len=100"],
     "error: --set model.max_model_len=100: `max_prompt_tokens` + `max_response_tokens` ("),
    ("advantage-arg-misspelled", nothing, [*FROZENLAKE_MAIN, "--set", "algorithm.advantage_fn_args.epsilonn=1"],
     "error: --set algorithm.advantage_fn_args.epsilonn=1: algorithm.advantage_fn_args.epsilonn: not a setting of "
     "advantage_fn 'step_wise_grpo' (it reads enable_step_norm, epsilon, std_cal_level, std_threshold); did you "
     "mean epsilon?"),
    ("kl-coef-not-a-number", nothing, [*FROZENLAKE_MAIN, "--set", "algorithm.kl_loss_fn_args.kl_coef=abc"],
     "error: --set algorithm.kl_loss_fn_args.kl_coef=abc: algorithm.kl_loss_fn_args.kl_coef: kl_loss_fn "
     "'low_var_kl' reads a number here, got 'abc'"),
    ("ppo-clip-range-not-a-number", nothing,
     [*FROZENLAKE_MAIN, "--set", "algorithm.policy_loss_fn_args.clip_range=abc"],
     "error: --set algorithm.policy_loss_fn_args.clip_range=abc: algorithm.policy_loss_fn_args.clip_range: "
     "policy_loss_fn 'ppo' reads a number here, got 'abc'"),
    ("operator-arg-it-ignores", nothing,
     [*MATH_MAIN, "--set",
      "data_processor.experience_pipeline.operators=[{{name: pass_rate_calculator, args: {{x: 1}}}}]"],
     "error: --set data_processor.experience_pipeline.operators=[{{'name': 'pass_rate_calculator', "
     "'args': {{'x': 1}}}}]: "
     "data_processor.experience_pipeline.operators.0.args.x: not a setting of operator 'pass_rate_calculator' (it "
     "reads none)"),
    ("engines-beside-the-trainer-on-one-gpu", nothing, [*FROZENLAKE_MAIN, "--gpus", "1", "--engines", "2"],
     "error: --engines 2: one GPU holds one rollout engine beside the trainer; give --engines 1, or plan more GPUs"),
    ("bots-split-without-pass-rates", lambda t: splits(t / "gsm", MATH, MATH),
     [*MATH_MAIN, "--train-dir", "{tmp}/gsm", "--eval-dir", "{tmp}/gsm"],
     "error: {tmp}/gsm/train.parquet: column 'qwen2.5_7b_pass_rate' is missing (expected columns question, answer, "
     "qwen2.5_7b_pass_rate, qwen3_30b_pass_rate); BOTS starts from reference models' pass rates per task, and this "
     "split has none: add two with scripts/add_pass_rates.py"),
    ("plot-out-a-folder", lambda t: (t / "plots").mkdir(),
     ["scripts/plot_runs.py", "{tmp}/run", "--out", "{tmp}/plots"], "error: --out {tmp}/plots: a folder"),
    # what a task row's workflow reads beyond the required columns, and text that must not be empty
    ("frozenlake-map-without-a-start", lambda t: splits(t / "d", {**FROZENLAKE, "desc": [["FFG", "FFF", "FFF"]]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/train.parquet: row 0: column 'desc' is ['FFG', 'FFF', 'FFF']; expected one start tile S and a "
     "goal G; regenerate it"),
    ("frozenlake-map-of-other-letters", lambda t: splits(t / "d", FROZENLAKE, {**FROZENLAKE, "desc": [["SX", "FG"]]}),
     [*EVALUATE, "--data", "{tmp}/d"],
     "error: --data {tmp}/d/test.parquet: row 0: column 'desc' is ['SX', 'FG']; expected rows of one length, each "
     "tile one of SFHG"),
    ("frozenlake-slippery-as-text", lambda t: splits(t / "d", FROZENLAKE, {**FROZENLAKE, "is_slippery": ["no"]}),
     [*EVALUATE, "--data", "{tmp}/d"],
     "error: --data {tmp}/d/test.parquet: row 0: column 'is_slippery' is 'no'; expected true or false"),
    ("frozenlake-episode-of-no-moves",
     lambda t: splits(t / "d", {"seed": [1, 2], "size": [3, 3], "p": [0.8, 0.8], "agent_max_steps": [10, 0]}),
     [*FROZENLAKE_MAIN, "--data-dir", "{tmp}/d"],
     "error: {tmp}/d/train.parquet: row 1: column 'agent_max_steps' is 0; expected a whole number of moves, 1 or "
     "more"),
    ("frozenlake-random-walk-rate-as-text",
     lambda t: splits(t / "d", FROZENLAKE, {**FROZENLAKE, "random_pass_rate": ["low"]}),
     [*EVALUATE, "--data", "{tmp}/d"],
     "error: --data {tmp}/d/test.parquet: row 0: column 'random_pass_rate' is 'low'; expected a pass rate from 0 "
     "to 1"),
    ("math-answer-without-ground-truth", lambda t: parquet(t / "aime" / "test.parquet", {**MATH, "answer": ["#### "]}),
     [*MATH_MAIN, "--eval-dir", "{tmp}/aime"],
     "error: {tmp}/aime/test.parquet: row 0: column 'answer' is '#### '; expected a final answer"),
    ("math-question-blank", lambda t: parquet(t / "aime" / "test.parquet", {**MATH, "question": ["  "]}),
     [*MATH_MAIN, "--eval-dir", "{tmp}/aime"],
     "error: {tmp}/aime/test.parquet: row 0: column 'question' is empty; expected the problem's text"),
    ("bots-features-strongest-first", nothing,
     [*MATH_MAIN, "--set",
      "buffer.explorer_input.taskset.data_selector.feature_keys=[qwen3_30b_pass_rate,qwen2.5_7b_pass_rate]"],
     "error: buffer.explorer_input.taskset.data_selector.feature_keys: qwen3_30b_pass_rate (mean 0.900 on "
     "{tmp}/m/train/train.parquet) is the stronger reference, qwen2.5_7b_pass_rate the weaker (0.500); BOTS reads "
     "the weaker's first"),
    ("bots-features-one-twice", nothing,
     [*MATH_MAIN, "--set",
      "buffer.explorer_input.taskset.data_selector.feature_keys=[qwen3_30b_pass_rate,qwen3_30b_pass_rate]"],
     "error: buffer.explorer_input.taskset.data_selector.feature_keys: qwen3_30b_pass_rate twice"),
    # values Trinity's checker lets through
    ("model-path-empty", nothing, [*FROZENLAKE_MAIN, "--set", "model.model_path="],
     "error: model.model_path (--model-path): empty (None); expected a local model folder or a hub id"),
    ("eval-interval-zero", nothing, [*FROZENLAKE_MAIN, "--set", "explorer.eval_interval=0"],
     "error: --set explorer.eval_interval: expected 1 or more, got 0"),
    ("learning-rate-negative", lambda t: text(t / "c.yaml", FROZENLAKE_YAML.replace("lr: 1e-6", "lr: -1e-6")),
     [*FROZENLAKE_MAIN, "--config", "{tmp}/c.yaml"],
     "error: --config {tmp}/c.yaml: algorithm.optimizer.lr: expected 0 or more, got -1e-06"),
    ("gradient-clip-negative", nothing, [*FROZENLAKE_MAIN, "--set", "trainer.grad_clip=-1"],
     "error: --set trainer.grad_clip: expected 0 or more, got -1"),
    ("engine-count-zero", nothing, [*FROZENLAKE_MAIN, "--set", "explorer.rollout_model.engine_num=0"],
     "error: --set explorer.rollout_model.engine_num: expected 1 or more, got 0"),
    ("ppo-clip-range-negative", nothing, [*FROZENLAKE_MAIN, "--set", "algorithm.policy_loss_fn_args.clip_range=-0.2"],
     "error: --set algorithm.policy_loss_fn_args.clip_range: expected 0 or more, got -0.2"),
    ("kl-coefficient-negative", nothing, [*FROZENLAKE_MAIN, "--set", "algorithm.kl_loss_fn_args.kl_coef=-1"],
     "error: --set algorithm.kl_loss_fn_args.kl_coef: expected 0 or more, got -1"),
    # outputs
    ("frozenlake-data-file-name-taken-by-a-folder", lambda t: (t / "new" / "test.parquet").mkdir(parents=True),
     ["scripts/get_frozenlake_data.py", "--local_dir", "{tmp}/new", "--train_size", "5", "--test_size", "2"],
     "error: {tmp}/new/test.parquet: a folder is in the way; expected to write a file there"),
    ("merge-base-without-weights",
     lambda t: (text(t / "base" / "config.json", '{"model_type": "qwen2"}'),
                text(t / "adapter" / "adapter_config.json", "{}"), text(t / "adapter" / "adapter_model.safetensors")),
     ["scripts/merge_lora.py", "{tmp}/base", "{tmp}/adapter", "--out", "{tmp}/merged"],
     "error: BASE {tmp}/base: cannot load its weights (OSError: "),
]


def good_data(folder):
    splits(folder / "fl", FROZENLAKE)
    parquet(folder / "m" / "train" / "train.parquet",
            {**MATH, "qwen2.5_7b_pass_rate": [0.5], "qwen3_30b_pass_rate": [0.9]})
    parquet(folder / "m" / "aime" / "test.parquet", MATH)


def snapshot(folder):
    """Every path below `folder` with its size and modification time: any write changes it."""
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.mark.parametrize("make,command,message", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_ends_with_a_message_and_writes_nothing(tmp_path, make, command, message):
    good_data(tmp_path)
    make(tmp_path)
    before = snapshot(tmp_path)
    if "{repo}/data/" in message and (REPO / "data" / "math_bots").exists():
        pytest.skip("the checkout holds the default data this case needs missing")
    script, *flags = [part.format(tmp=tmp_path) for part in command]
    result = launches.run([sys.executable, str(REPO / script), *flags], cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    last_line = (result.stderr.strip().splitlines() or [""])[-1]
    assert message.format(tmp=tmp_path, repo=REPO) in last_line, result.stderr[-2000:]  # whole, on one line
    before_it = result.stderr.strip().splitlines()[:-1]  # nothing else, but the launcher's own warnings
    assert all(line.startswith("warning: ") for line in before_it), result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout and " [config_validator.py:" not in result.stdout
    assert snapshot(tmp_path) == before, "a refused input must leave nothing written"


@pytest.mark.parametrize("name", ["RFTKIT_MICRO_BATCH_SHARE", "RFTKIT_LEAN_ENGINE"])
def test_a_patch_switch_neither_0_nor_1_is_refused(tmp_path, name):
    """A switch read as "1" by one patch and "not 0" by another: "false" must not pass for either."""
    good_data(tmp_path)
    before = snapshot(tmp_path)
    flags = [part.format(tmp=tmp_path) for part in FROZENLAKE_MAIN[1:]]
    result = launches.run([sys.executable, str(REPO / FROZENLAKE_MAIN[0]), *flags], cwd=tmp_path, timeout=120,
                          env={**os.environ, name: "false"})
    assert result.returncode == 2, result.stderr[-2000:]
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == f"error: {name}=false in the environment: expected 0 (off) or 1 (on)"
    assert snapshot(tmp_path) == before


def test_the_bots_kwargs_checked_are_those_trinitys_selector_reads():
    """rftkit.inputs.BOTS_KWARGS against the names Trinity-RFT's DifficultyBasedSelector and its estimator read."""
    import inspect
    import re

    from trinity.buffer.selector.selector import DifficultyBasedSelector

    from rftkit.inputs import BOTS_KWARGS

    source = inspect.getsource(DifficultyBasedSelector)
    read = set(re.findall(r"(?:kwargs|config)\.get\(\s*\"(\w+)\"", source))
    assert read == set(BOTS_KWARGS)


class Base:
    def __init__(self, kl_coef: float = 0.1):
        self.kl_coef = kl_coef


class ReadsByName(Base):
    def __init__(self, epsilon: float = 1e-6, **kwargs):
        self.scale = kwargs.get("scale", 1.0)
        self.mode = kwargs["mode"]


class PassesOn(Base):
    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)


class Ignores(Base):
    def __init__(self, **kwargs):
        pass


class Keeps(Base):
    def __init__(self, **kwargs):
        self.options = kwargs


@pytest.mark.parametrize("cls,names", [
    (ReadsByName, {"epsilon", "scale", "mode"}),
    (PassesOn, {"epsilon", "kl_coef"}),
    (Ignores, set()),  # what Trinity-RFT 0.6.0's pass_rate_calculator and default sample strategy do
    (Keeps, None),  # read elsewhere: not known here, so not refused
])
def test_a_plugins_arguments_are_what_its_constructors_read(cls, names):
    from rftkit.trinity_config import accepted_names, args_problem

    assert accepted_names(cls) == names
    problem = args_problem("algorithm.x_args", "x 'it'", cls, {"epsilonn": 1})
    assert (problem is None) == (names is None)
    if names and "epsilon" in names:
        assert problem.endswith("did you mean epsilon?")
        assert args_problem("algorithm.x_args", "x 'it'", cls, {"epsilon": "small"}) == \
            "algorithm.x_args.epsilon: x 'it' reads a number here, got 'small'"


def test_a_dry_run_says_what_this_machine_would_refuse(tmp_path):
    from rftkit.trainer import attention

    if attention.flash_attn_error() is None:
        pytest.skip("flash-attn imports here")
    good_data(tmp_path)
    result = launches.run([sys.executable, str(REPO / "frozenlake" / "main.py"), "--dry-run", "--gpus", "2",
                           "--data-dir", str(tmp_path / "fl"), "--attn", "flash_attention_2"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\nnot on this machine (a launch here refuses it): " in result.stdout and "--attn varlen" in result.stdout


def test_a_dry_run_without_gpus_shows_no_no_gpu_banner(tmp_path):
    """Trinity's GPU memory check (it runs in mode both, so with two GPUs planned) logs a NO GPU DETECTED
    banner where CUDA is missing; a dry run leaves it out, and shows the validators' other messages."""
    good_data(tmp_path)
    result = subprocess.run([sys.executable, str(REPO / "frozenlake" / "main.py"), "--dry-run", "--gpus", "2",
                             "--data-dir", str(tmp_path / "fl")], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(mode both)" in result.stdout
    assert "NO GPU DETECTED" not in result.stdout + result.stderr
    assert "config_validator.py" in result.stdout  # Trinity's validators still speak


def test_the_no_gpu_banner_is_left_out_only_while_trinity_logs_it_as_in_0_6_0():
    from rftkit.check_patches import no_gpu_banner

    class MovedCheck:
        logger = None

        def validate_trainer_memory_usage(self, config):
            self.logger.warning("no CUDA here")

    with pytest.raises(RuntimeError, match="no longer logs its NO GPU DETECTED banner"):
        with no_gpu_banner(MovedCheck()):
            pass


def yaml_keys(node, path=()):
    """Every dotted key of a YAML mapping, down to its leaves (list items by index)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        yield ".".join(map(str, (*path, key)))
        yield from yaml_keys(value, (*path, key))


@pytest.mark.parametrize("config", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_key_of_the_shipped_configs_can_be_set(config):
    from rftkit.overrides import load_yaml
    from rftkit.inputs.config_keys import check_set_key

    for key in yaml_keys(load_yaml(config)):
        check_set_key(key)


def test_a_key_below_a_mapping_is_left_to_whoever_reads_it():
    from rftkit.inputs.config_keys import check_set_key

    check_set_key("trainer.trainer_config.actor_rollout_ref.actor.anything")  # verl's settings, read by verl


def test_a_message_of_several_lines_from_trinity_is_joined():
    """As Trinity 0.6.0's data processor check words one; OmegaConf's, from its loader, is key-trinity-rejects."""
    from rftkit.trinity_config import one_line

    error = ValueError("Task pipeline output path /x already exists.\nPlease choose a different output path.")
    assert one_line(error) == "Task pipeline output path /x already exists. Please choose a different output path."


@pytest.mark.parametrize("command,line", [
    (["scripts/evaluate.py", "--task", "frozenlake", "--model", "oracle", "--out", "o", "--limit", "-3"],
     "error: --limit: must be at least 1, got -3"),
    (["scripts/get_frozenlake_data.py", "--map_max_size", "x"],
     "error: --map_max_size/--map-max-size: invalid int value: 'x'"),
    (["frozenlake/main.py", "--dry-run", "--no-such-flag"], "error: unrecognized arguments: --no-such-flag"),
    (["math_bots/main.py", "--gpus"], "error: --gpus: expected one argument"),
    (["scripts/evaluate.py", "--task", "frozenlake", "--model", "oracle", "--out", "o", "--timeout", "0"],
     "error: --timeout: must be more than 0, got 0"),
    (["benchmarks/sandbox_tool.py", "0"], "error: calls: must be at least 1, got 0"),
], ids=["evaluate-limit", "data-size-not-a-number", "unknown-flag", "flag-without-value", "evaluate-timeout",
        "benchmark-count"])
def test_a_bad_argument_is_one_line_without_the_usage(tmp_path, command, line):
    result = subprocess.run([sys.executable, str(REPO / command[0]), *command[1:]], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (2, line + "\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module,flags", [
    ("experiments.frozenlake_learning", ["--minutes", "1", "--data", "{tmp}/fl"]),
    ("experiments.frozenlake_learning", ["--before-only", "--data", "{tmp}/fl"]),  # needs no length
    ("experiments.bots_comparison", ["--selector", "random", "--minutes", "1", "--data", "{tmp}/math"]),
    ("experiments.serve_startup", ["--data", "{tmp}/fl", "--variant", "default"]),
    ("experiments.startup", ["--data", "{tmp}/fl", "--variant", "default"]),
], ids=["frozenlake-learning", "frozenlake-before-only", "bots-comparison", "serve-startup", "startup"])
def test_an_experiment_on_a_machine_without_a_gpu_stops_before_its_first_step(tmp_path, module, flags):
    """Where torch sees no GPU, an experiment that serves or trains a model says so before it converts the model,
    makes data or starts a server, and leaves --out unmade."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from conftest import config_only_model

    splits(tmp_path / "fl", FROZENLAKE)
    splits(tmp_path / "math", MATH, MATH)
    model = config_only_model(tmp_path / "model")
    before = snapshot(tmp_path)
    result = launches.run([sys.executable, "-m", module, str(model), "--out", str(tmp_path / "out"),
                           *[flag.format(tmp=tmp_path) for flag in flags]], cwd=REPO, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].endswith("needs a CUDA GPU; this machine has none (docs/gpu.md)")
    assert snapshot(tmp_path) == before


def test_a_startup_variant_with_a_key_trinity_lacks_is_refused_before_the_first_launch(tmp_path):
    from conftest import config_only_model

    splits(tmp_path / "fl", FROZENLAKE)
    model = config_only_model(tmp_path / "model")
    result = launches.run([sys.executable, "-m", "experiments.startup", str(model), "--out", str(tmp_path / "out"),
                           "--data", str(tmp_path / "fl"), "--variant", "default",
                           "--variant", "lean=RFTKIT_LEAN_ENGINE=1,explorer.runner_per_modle=4"], cwd=REPO, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --variant lean: Trinity-RFT's config has no key explorer.runner_per_modle "
        "(nearest: explorer.runner_per_model, explorer.runner_num)")
    assert not (tmp_path / "out").exists()


def interrupted(command, cwd, marker):
    """Run `command`, send it Ctrl-C's signal once `marker` shows in its stderr (its work has begun): (exit status,
    stderr's lines)."""
    import signal
    import threading
    import time

    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: process.stderr.read(64), "")), daemon=True)
    reader.start()
    deadline = time.time() + 180
    while marker not in "".join(seen) and process.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=120)
    reader.join(timeout=10)
    return process.returncode, [line for line in "".join(seen).replace("\r", "\n").splitlines() if line.strip()]


def test_a_ctrl_c_before_a_progress_bars_block_is_entered_still_ends_in_one_line_of_its_own(capsys):
    from tqdm import tqdm

    from rftkit.inputs import reports_input_errors

    @reports_input_errors
    def main():
        bar = tqdm(total=10, desc="training maps")  # drawn; the Ctrl-C comes before a `with` would close it
        raise KeyboardInterrupt(bar)

    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 130
    assert capsys.readouterr().err.replace("\r", "\n").splitlines()[-1] == "error: interrupted (Ctrl-C)"


@pytest.mark.parametrize("script,flags,marker,message", [
    ("scripts/evaluate.py", ["--task", "frozenlake", "--data", "{tmp}/fl", "--model", "random", "--repeats", "20000",
                             "--out", "{tmp}/out"], "episodes:",
     "error: interrupted (Ctrl-C) while playing 20000 episodes; nothing was written: evaluate.py writes its reports "
     "once every episode is played and cannot resume"),
    ("scripts/get_frozenlake_data.py", ["--local_dir", "{tmp}/out", "--train_size", "1000000", "--test_size", "10"],
     "training maps:", "error: interrupted (Ctrl-C)"),
], ids=["evaluate", "get-frozenlake-data"])
def test_ctrl_c_ends_an_entry_point_with_one_line_130_and_nothing_written(tmp_path, script, flags, marker, message):
    good_data(tmp_path)
    code, lines = interrupted([sys.executable, str(REPO / script), *(f.format(tmp=tmp_path) for f in flags)],
                              tmp_path, marker)
    assert code == 130, lines[-5:]
    assert lines[-1].startswith(message) and not any("Traceback" in line for line in lines), lines[-5:]
    assert not (tmp_path / "out").exists()



def test_a_ctrl_c_that_numpy_turns_into_its_own_error_is_kept_as_the_interrupt():
    import signal

    import numpy as np

    from rftkit.inputs import ctrl_c_kept

    class PressesCtrlC:
        def __str__(self):  # numpy asks for the text inside its item assignment
            signal.raise_signal(signal.SIGINT)
            return "S"

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(ValueError, match="Error setting single item"):  # what numpy makes of it unaided
        np.array(["F"]).flat[0] = PressesCtrlC()
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_kept():
            np.array(["F"]).flat[0] = PressesCtrlC()
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(ValueError):  # the same kind of error without a Ctrl-C stays what it is
        with ctrl_c_kept():
            np.array([1.0]).flat[0] = "not a number"
