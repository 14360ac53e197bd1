"""The judging loop: scores samples (heuristic, LLM and plugin judges, votes, OPD hints and teacher
log-probs), explicit ratings, judge health. Imports backends, core, store and chat."""
