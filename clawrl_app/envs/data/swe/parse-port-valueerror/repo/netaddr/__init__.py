"""Network address helpers."""
