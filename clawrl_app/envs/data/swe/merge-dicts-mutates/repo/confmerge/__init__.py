"""Merging configuration dicts."""
