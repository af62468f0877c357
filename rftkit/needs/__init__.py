"""What a run needs, said before it launches: the trainer's GPU memory (`memory`) and its checkpoints' disk
(`disk`), each from the validated config and the model's shape."""
