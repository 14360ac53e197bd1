"""What the loops share beyond chat: the event types, the checkpoint folder format, the CPU share
between serving and training, plugin loading and the held-out split. Imports store only."""
