"""What drives the examples from outside them, for the entry points and the GPU scripts: `examples`,
the examples this project ships and their configs; `commands`, the launch command line built from
settings; `steps`, the one runner of a step (a launch, an evaluation, a data script) as a subprocess."""
