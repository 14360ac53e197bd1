"""The serving loop: the OpenAI-compatible endpoint, the chat service that records every turn,
session inference, the web guard and sampling defaults. Imports backends, core, store and chat."""
