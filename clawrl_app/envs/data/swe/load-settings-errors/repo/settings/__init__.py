"""Application settings."""
