"""The training loop: the trainer process, its supervisor, config, lease, losses, forward pass,
data and schedule. Imports backends, core, store and chat; never serving or publishing."""
