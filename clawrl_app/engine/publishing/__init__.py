"""The publishing loop: serves a new checkpoint after the canary and the regression guard,
rollback, side-by-side compare and retention. Imports backends, core, store and chat."""
