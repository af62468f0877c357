"""Code the FrozenLake and math examples share: launching a tuner run, and the inputs and files every
entry point shares.

launch.py          the flags both main.py files take, and launch(): a run from YAML to exit code
overrides.py       the YAML and `--set`: what tune() will load, paths made absolute
cluster.py         the run sized to the GPUs, and the Ray it runs on
trinity_config.py  Trinity's validation of the config, and its plugins
summary.py         the dry run's account of what a validated config will run
memory.py          the trainer's GPU memory, estimated with Trinity's formula and checked against the card
check_patches.py   the launcher's patches that keep Trinity's config checks light
supervise.py       watching a running tune() and deciding whether it finished
startup.py         the start-up timeline: each phase's end, printed and kept in the run's folder
gpu_samples.py     the GPUs' utilization while a run trains, sampled by nvidia-smi into the run's folder
run_state.py       Trinity's state files made safe to resume from after a kill
checkpoints.py     checkpoints a kill cannot leave half-written where a relaunch would load them
workers.py         Ray's worker setup hook: the patches a run's workers get
files.py, cli.py   whole-file writes, help with defaults
example.py         the Example an example folder describes itself with
timed_model.py     a chat model that times its calls, for the workflows' model_seconds

keys/              the config keys the project names, and the one dotted get/has/put
inputs/            bad input as a message: task splits, config keys and model paths checked first
patches/           every runtime patch of another package, declared in one table, and the helper that installs it
trainer/           what the patches put in verl and Trinity-RFT inside the Ray workers
reports/           evaluating a model and reporting on runs
trinity_plugins/   Trinity plugins, imported by name in the launcher and in every Ray worker
"""
