"""Parsing "host:port" strings."""


def parse_hostport(value: str) -> tuple[str, int]:
    """Split "host:port" into (host, port). Raises ValueError when `value` is malformed."""
    parts = value.split(":")
    host, port = parts[0], parts[1]
    if not host:
        raise ValueError(f"missing host in {value!r}")
    return host, int(port)
