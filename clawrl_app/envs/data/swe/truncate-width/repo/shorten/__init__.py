"""Shortening text for narrow displays."""
