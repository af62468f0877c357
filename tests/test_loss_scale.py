"""rftkit.trainer.loss_scale: each micro-batch's loss weighted by its share of the mini-batch, for each of Trinity's
aggregation modes, on unless the launch's environment switches it off. The trainer's real path, cut in several
micro-batches against one, is in tests/test_trainer_speed.py."""

import pytest
import torch

from conftest import trinity_config_stub
from rftkit import patches
from rftkit.trainer.loss_scale import share


def test_a_micro_batch_counts_by_its_tokens_or_its_sequences_times_the_data_parallel_ranks():
    # 2 sequences, 4 response tokens, as the engine hands them over: one jagged row a sequence
    mask = torch.nested.nested_tensor([torch.tensor([1, 1, 1]), torch.tensor([1])], layout=torch.jagged)
    data = {"loss_mask": mask, "batch_num_tokens": 16, "global_batch_size": 8, "dp_size": 2}
    assert float(share(data, "token-mean")) == pytest.approx(4 / 16 * 2)
    assert share(data, "seq-mean-token-mean") == pytest.approx(2 / 8 * 2)
    assert share(data, "seq-mean-token-sum") == pytest.approx(2 / 8 * 2)
    assert share(data, "seq-mean-token-sum-norm") == 2  # a sum already: FSDP's average over ranks undone
    with pytest.raises(ValueError, match="loss_agg_mode 'token-sum'"):
        share(data, "token-sum")


def test_the_micro_batches_of_one_batch_add_up_to_its_token_mean():
    """Two micro-batches' weighted means, summed as verl's engine sums their gradients, are the batch's mean."""
    values = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [5.0, 6.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
    data = {"batch_num_tokens": int(mask.sum()), "global_batch_size": 3, "dp_size": 1}
    total = 0.0
    for rows in (slice(0, 1), slice(1, 3)):
        part, part_mask = values[rows], mask[rows]
        total += (part * part_mask).sum() / part_mask.sum() * share({**data, "loss_mask": part_mask}, "token-mean")
    assert float(total) == pytest.approx(float((values * mask).sum() / mask.sum()))


def test_the_switch_is_on_unless_the_environment_says_0_and_reaches_the_workers(monkeypatch):
    import ray

    from rftkit import cluster

    from rftkit.summary import micro_batch_weighting

    switch = patches.PATCHES["loss.micro_batch_share"].switch
    monkeypatch.delenv(patches.MICRO_BATCH_SHARE_ENV, raising=False)
    assert switch.on() and micro_batch_weighting() == "each weighted by its share of the batch's tokens"
    monkeypatch.setenv(patches.MICRO_BATCH_SHARE_ENV, "0")
    assert not switch.on() and "RFTKIT_MICRO_BATCH_SHARE=0, Trinity-RFT's" in micro_batch_weighting()  # the dry run
    asked = {}
    monkeypatch.setattr(ray, "init", lambda **kwargs: asked.update(kwargs))
    namespace = {}
    exec(trinity_config_stub("loss-scale-test", "colocate"), namespace)
    cluster.connect_ray(namespace["Config"]())
    assert asked["runtime_env"]["env_vars"][patches.MICRO_BATCH_SHARE_ENV] == "0"
