"""Retrying flaky calls."""
