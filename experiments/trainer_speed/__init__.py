"""How fast the trainer runs: each setting of `settings.SETTINGS` beside the bare model, on this GPU.

    python -m experiments.trainer_speed --out outputs/trainer-speed                    # both examples
    python -m experiments.trainer_speed frozenlake --out DIR --settings before varlen  # one, some settings
    python -m experiments.trainer_speed --report-only --out DIR                        # the report again

The trainer runs alone, without Ray's rollout side: Trinity-RFT's own trainer worker (actor and
reference model) built from the shipped config as a launch builds it, fed a batch of Trinity
`Experience`s of the example's shape (its `Scale`: FrozenLake Qwen2.5-3B's architecture, math
Qwen3-0.6B's, with random weights). Each setting runs in a process of its own (`worker.py`): a
warm-up step, then `--steps` steps of the reference pass and the actor's update, and for the settings
that ask for it one colocated weight sync into a real Synchronizer actor; a LoRA setting (`varlen-lora`,
`liger-lora`) trains the launcher's default adapter, and its sync is the adapter file the engine loads,
followed by a full checkpoint saved and loaded into a second worker. The ceiling (`ceiling.py`)
is the bare transformers model, forward and backward with gradient checkpointing over the same
sequences, packed and padded, the faster counted.

Written to <out>/summary.{json,md} and <out>/trainer_speed.png (`report.py`): tokens per second per
pass, MFU against `settings.PEAK_FLOPS`, peak memory, the sync's seconds, and each figure's ratio to
`before` and to the ceiling. A packed setting whose first reference log-probs are more than
`settings.LOGPROB_TOLERANCE` from `sdpa-blocks`' on average fails the run (exit 1), as does any
setting that fails. With `--profile`, each setting runs one more step under PyTorch's profiler
(`profile.py`): how much of the step the GPU was busy, and so how long it idled in the timed steps,
where the host stopped to wait for it, and which functions the host was in while the GPU idled.
"""
