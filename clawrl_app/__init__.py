"""clawrl-app: train your own agent by using it."""

__version__ = "0.1.0"
