"""Reliability and security tests against a real engine."""
