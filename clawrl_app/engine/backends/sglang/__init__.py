"""The SGLang backend (GPU machines): launching the server, its routes and streams, and the
factory the plan calls. Imports the shared backend modules above it."""
