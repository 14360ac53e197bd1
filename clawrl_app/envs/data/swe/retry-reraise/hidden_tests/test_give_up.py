import pytest

from retrying.retry import retry


def test_reraises_the_last_error():
    calls = []

    def always_fails():
        calls.append(1)
        raise OSError(f"failure {len(calls)}")

    with pytest.raises(OSError, match="failure 3"):
        retry(always_fails, attempts=3)
    assert len(calls) == 3


def test_other_exceptions_propagate_at_once():
    calls = []

    def wrong():
        calls.append(1)
        raise KeyError("x")

    with pytest.raises(KeyError):
        retry(wrong, attempts=5, exceptions=(OSError,))
    assert len(calls) == 1
