"""What drives the examples from outside them, for the entry points and the GPU scripts: `examples`,
the examples this project ships and their configs."""
