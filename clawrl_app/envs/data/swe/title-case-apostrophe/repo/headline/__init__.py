"""Headline formatting."""
