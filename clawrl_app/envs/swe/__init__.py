"""`swe`: Python bug-fix tasks (ENVS.md §5.7.B). Part 2 of the agentic environments; so far
the patch filter (what a submitted patch may touch)."""
