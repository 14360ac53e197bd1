"""The engine: the orchestrator (`orchestrator.Engine`, run by `engine_thread`) wires the loops
below it. Layers, top to bottom (kept by import-linter in pyproject.toml): orchestrator ->
admin -> loops (serving, collecting, judging, training, publishing, environments; independent of
each other) -> backends, core, wire -> store -> chat. Nothing imports the orchestrator back."""
