"""Forgiving comparisons."""
