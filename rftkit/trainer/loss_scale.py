"""Each micro-batch's loss weighted by its share of the mini-batch, which Trinity-RFT 0.6.0's loss leaves out.

verl 0.8's FSDP engine cuts a mini-batch into micro-batches by the token budget (`use_dynamic_bsz`), calls the
loss function on each, and runs backward on what it returns, so the gradients add up. The weighting is the
loss's job: verl's own losses divide by the mini-batch's tokens (`batch_num_tokens`, which the engine puts in
each micro-batch's data) and multiply by the data-parallel size, since FSDP averages gradients over the ranks.
Trinity's `TrinityPolicyLoss`, which replaces them, returns each micro-batch's own mean. So the gradient was
the sum of the micro-batches' means: about n times the mini-batch's gradient for n micro-batches, each
micro-batch weighing the same whatever its tokens, and the gradient clipping threshold in effect divided by n
(measured: docs/upstream.md#the-trainer). Trinity's legacy actor weighted its micro-batches; its engine path
does not.

`weigh_micro_batches` multiplies the returned loss by the micro-batch's share, as verl's `agg_loss` does for
each of Trinity's aggregation modes (one mode for the policy, KL and entropy terms: Trinity's config checker
copies `algorithm.loss_agg_mode` into the policy loss's arguments):
- "token-mean": the micro-batch's response tokens over the mini-batch's, times the data-parallel size;
- "seq-mean-token-sum", "seq-mean-token-mean": its sequences over the mini-batch's (`global_batch_size`),
  times the data-parallel size;
- "seq-mean-token-sum-norm", a sum over a fixed length already: the data-parallel size alone.
The `final_loss` metric stays the micro-batch's own loss, as Trinity logs it.
"""

from __future__ import annotations

from types import ModuleType

from rftkit.patches.apply import replace

SEQUENCE_MEANS = ("seq-mean-token-sum", "seq-mean-token-mean")


def share(data, mode: str):
    """What a micro-batch's mean counts for in its mini-batch's loss (`data`, the engine's micro-batch: its
    `loss_mask`, one row a sequence, is what the engine counted `batch_num_tokens` from)."""
    ranks, mask = data["dp_size"], data["loss_mask"]
    if mode == "token-mean":
        return mask.sum() / data["batch_num_tokens"] * ranks
    if mode in SEQUENCE_MEANS:
        return mask.size(0) / data["global_batch_size"] * ranks
    if mode == "seq-mean-token-sum-norm":
        return ranks
    raise ValueError(f"rftkit.trainer.loss_scale: loss_agg_mode {mode!r} has no micro-batch weighting here; "
                     f"expected token-mean, {', '.join(SEQUENCE_MEANS)} or seq-mean-token-sum-norm")


def weigh_micro_batches(module: ModuleType) -> None:
    """Patch Trinity-RFT 0.6.0's TrinityPolicyLoss: its loss is weighted by the micro-batch's share (`share`)."""
    def weighted(call):
        def __call__(self, model_output, data, dp_group=None):
            loss, metrics = call(self, model_output, data, dp_group)
            return loss * share(data, self.loss_agg_mode), metrics
        return __call__

    replace("loss.micro_batch_share", module, "TrinityPolicyLoss.__call__", weighted)
