"""What every loop shares about chat: formatting and tokens, message text, the OpenAI schema and
errors, temperature, the tool-call grammar, repetition. Imports nothing else of the engine."""
