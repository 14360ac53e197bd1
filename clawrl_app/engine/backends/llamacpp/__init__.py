"""The llama.cpp backend (the CPU default): its runtime, sequences, weights and the GGUF export
of the base model and LoRA adapters. Imports the shared backend modules above it."""
