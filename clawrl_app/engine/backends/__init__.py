"""The serving backends behind one protocol (`base.Backend`): torch, llama.cpp and SGLang, and
their set-up from the hardware plan (`setup`). Imports chat only (and the app's planning
modules)."""
