"""Experiments on GPUs, each with a page under docs/results that quotes its command. Run them from the
repo's root as modules, `python -m experiments.<name> --help`:

- `frozenlake_learning`: FrozenLake with a real model, evaluated, trained, evaluated again, drawn;
- `step_cost`: what a training step costs at the configs' real scale (random weights);
- `trainer_speed`: the trainer alone, the old settings against the new, beside the bare model;
- `math_pass_rates`: reference pass rates of the math split, the BOTS features;
- `bots_comparison`: BOTS against random selection on one GPU with a real model;
- `engine_ceiling`: a run's own rollout requests replayed straight on vLLM, beside its explorer's rate;
- `memory_table`: what fits which GPU, by the trainer's memory estimate, beside the peaks measured (CPU only);
- `qwen_coder_gguf.sh`: the model of the learning run and the pass rates (`bash experiments/qwen_coder_gguf.sh`).

Their plumbing (the vLLM server, the evaluation command, run folders, the tiny model, sample data) is
runkit's; no experiment imports another."""
