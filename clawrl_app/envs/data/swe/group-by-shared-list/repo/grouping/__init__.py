"""Grouping helpers."""
