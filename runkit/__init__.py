"""What drives the examples from outside them, for the entry points, the experiments and the GPU smoke:

- `examples`: the examples this project ships and their configs;
- `commands`: the command lines built from settings, a launch's and an evaluation's;
- `steps`: the one runner of a step (a launch, an evaluation, a data script) as a subprocess;
- `runs`: a run's folder and its last checkpoint, as Trinity leaves them;
- `sample_data`: small data for every registered example, from the example's own `sample_writer`;
- `serving`: a model served by vLLM for an evaluation (a GGUF turned into an HF folder first);
- `tiny_model`: random-weight models built offline, tiny or of a real model's architecture;
- `training_flags`: the checks of the flags every experiment that trains a model takes.

The stand-ins that tests and benchmarks run against (a fake vLLM server, the adapter harness) are in
`standins`."""
