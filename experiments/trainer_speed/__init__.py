"""How fast the trainer runs: the old settings against the new, beside the bare model, on this GPU.

    python -m experiments.trainer_speed --out outputs/trainer-speed                    # both examples
    python -m experiments.trainer_speed frozenlake --out DIR --settings before varlen  # one, some settings

A real launch spends minutes on Ray, the rollout engine and rollouts before the trainer's first
step (10 minutes for the 3B FrozenLake model on one H200). This benchmark runs the trainer alone:
Trinity-RFT's own trainer worker (`TrinityActorRolloutRefWorker`, the actor and the reference
model), built from the shipped config exactly as a launch builds it (the launcher's overrides,
Trinity's checker, Trinity's verl config), and the trainer's own step functions on a batch of
Trinity `Experience`s shaped like the example's (its `scale`, in `<example>/example.py`):

* FrozenLake: Qwen2.5-3B's architecture (random weights), 64 experiences, prompts of 280 to 480
  tokens and replies of 16 to 256 (one move each);
* math: Qwen3-0.6B's architecture, 16 experiences, prompts of 100 to 300 tokens and replies of
  512 to 4,096.

The train batch is the benchmark's batch (one optimizer step per trainer step, as in a launch);
everything else is the shipped config's. Per setting, in a process of its own (`--worker`), it
times a warm-up step and then `--steps` steps of: the reference model's log-probabilities, then
the actor's update (forward, log-probs, entropy, Trinity's multi-step GRPO loss, backward,
optimizer step); then, for `before` and `varlen`, one colocated weight sync as Trinity makes it
(the trainer worker's `upload_state_dict` into a real Synchronizer actor, and the engine's side of
it: every tensor fetched from the object store onto the GPU; vLLM's own load into its weights is
not included). The settings:

* `before`: the trainer as the project first ran it: `--attn sdpa` (padded micro-batches), verl's
  row-by-row log-probs, the reference model's weights in fp32, fp32 weights pickled through the
  object store;
* `sdpa-blocks`: padded, with `rftkit.trainer.logprobs`: the log-probs every other setting is checked against;
* `varlen`: the launcher's default without flash-attn, with the shipped config: packed
  micro-batches on PyTorch's varlen kernels, log-probs in blocks, the reference model in bf16 with
  its weights on the GPU (`rftkit.trainer.ref_model`), the weights synced in bf16 as byte views;
* `varlen-32k`: `varlen` with 32,768-token micro-batches (FrozenLake ships 16,384);
* `varlen-ref-cpu`: `varlen` with the reference weights where verl 0.8 puts them, on the CPU,
  copied to the GPU for every micro-batch (as `varlen` ran before `rftkit.trainer.ref_model`).

The padded settings run at the micro-batch sizes the padded path fits: FrozenLake 4,096 (what its
configs held), math 12,288 (the config's 24,576 ran out of memory padded).

The ceiling, in a process of its own: the bare transformers model (bf16, gradient checkpointing)
running forward and backward over the same sequences, packed into micro-batches of the config's
token budget (varlen attention) and padded (sdpa with a mask); the faster of the two counts.

Printed, and written to <out>/summary.{json,md} and <out>/trainer_speed.png: tokens per second of
a trainer step (reference pass plus update), of each pass, model FLOPs utilisation (6 x parameters
per token for forward and backward, 2 x for a forward pass, against 989 TFLOP/s, the H200's bf16
peak), peak GPU memory, the weight sync's seconds, and each figure's ratio to `before` and to the
ceiling. It also checks correctness: every setting's reference log-probs of the first step (same
weights, same batch) are compared with `sdpa-blocks`', and a packed setting more than
LOGPROB_TOLERANCE apart on average fails the run (exit 1), as does any setting that fails.
"""
