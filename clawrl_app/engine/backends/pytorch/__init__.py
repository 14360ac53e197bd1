"""The torch backend (transformers + PEFT): batched decode, KV batches, LoRA hooks and merges,
the NF4 base of QLoRA. Imports the shared backend modules above it."""
