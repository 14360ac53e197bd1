"""Formatting lists for people."""
