"""The trainer without flash-attn, on one GPU, and started sooner: patches to verl and Trinity-RFT
applied inside a run's Ray workers (declared in rftkit.patches, installed by rftkit.workers, Ray's worker
setup hook).

attention.py         which attention the trainer loads the model with, and its worker setup
liger.py             liger-kernel's fused layers in the trainer, where installed (`--liger`)
packed_attention.py  packed micro-batches on PyTorch's own variable-length kernels (`--attn varlen`)
logprobs.py          token log-probabilities in blocks, for verl without flash-attn
ref_model.py         the reference model's weights on the GPU
colocate.py          one GPU: the rollout engine beside the trainer
weight_sync.py       one GPU: weights handed to the engine in its dtype, as byte views
lora_saves.py        LoRA: the adapter alone written at each sync, and kept in checkpoints instead of the base
concurrent_start.py  the trainer's workers built while the engine starts (a switch)
early_runners.py     the workflow runners started while the engine starts (a switch)
lean_engine.py       a one-GPU rollout engine in two processes instead of four (a switch)

They import only each other and rftkit.patches: a worker loads no launcher code.
"""

# The attention implementation packed_attention registers with transformers, and attention chooses by
# name: here, so that choosing it imports no torch. It must not contain "flash" (transformers treats
# such names as hub kernels to download).
VARLEN_ATTENTION = "rftkit_varlen"

