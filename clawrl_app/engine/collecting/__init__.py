"""The collecting loop: links each turn to the message that follows it (a sample), and records
the engine's events and the store's health. Imports core, store and chat."""
