"""The imports the training runs depend on, with the versions picked up: the last step of a GPU install."""

import importlib.metadata as md

import agentscope.tuner  # noqa: F401
import ray  # noqa: F401
import torch  # noqa: F401
import transformers  # noqa: F401
import trinity  # noqa: F401
import verl  # noqa: F401
import vllm  # noqa: F401

import rftkit.launch  # noqa: F401  (the project: the launcher, and every example through its registry)
import runkit.examples  # noqa: F401

for dist in ["vllm", "ray", "trinity-rft", "verl", "agentscope", "transformers", "torch", "numpy", "pyarrow"]:
    print(f"  {dist:14s} {md.version(dist)}")
print("imports OK")
