"""Evaluating a model and reporting on runs; used by scripts/evaluate.py, the examples' report.py
and the experiments, never by a launch.

evaluation.py   play episodes concurrently; pass rates with Wilson intervals; the paired sign test
local_llm.py    a small LLM served by llama.cpp, for smoke evaluations on CPU
tensorboard.py  the scalars a run wrote
plots.py        matplotlib writing PNG files, and the bar chart the reports share
"""
