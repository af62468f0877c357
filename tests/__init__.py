"""The test suite (README.md says what it covers), and the GPU smoke harness in tests/gpu.

A package so that `python -m tests.gpu.smoke` finds this folder: verl installs a top-level package
named `tests` too, and an installed package wins over a folder without an __init__.py."""
