"""A run that a kill at any moment cannot set back: what a relaunch resumes from.

checkpoints.py  the trainer's checkpoints: pointer files written whole, no rewrite or deletion of the one named,
                and before a launch, a named checkpoint found incomplete set aside for the one before it
run_state.py    Trinity's state files written whole, the explorer's state kept per step, and before a launch
                the explorer put back to the trainer's checkpoint
"""
