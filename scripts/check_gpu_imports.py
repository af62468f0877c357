"""The imports the training runs depend on, with the versions picked up: the last step of a GPU install."""

import argparse
import importlib
import importlib.metadata as md

# The stack, then the project: the launcher, and every example through its registry.
MODULES = ["agentscope.tuner", "ray", "torch", "transformers", "trinity", "verl", "vllm",
           "rftkit.launch", "runkit.examples"]
DISTRIBUTIONS = ["vllm", "ray", "trinity-rft", "verl", "agentscope", "transformers", "torch", "numpy", "pyarrow"]


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help answers before the imports, which are slow
    for name in MODULES:
        importlib.import_module(name)
    for dist in DISTRIBUTIONS:
        print(f"  {dist:14s} {md.version(dist)}")
    print("imports OK")


if __name__ == "__main__":
    main()
