import pytest

from seqtools.windows import windows


def test_too_short():
    assert windows([1], 2) == []


def test_bad_size():
    with pytest.raises(ValueError):
        windows([1, 2], 0)
