"""Sequence helpers."""
