from seqtools.windows import windows


def test_last_window():
    assert windows([1, 2, 3], 2) == [(1, 2), (2, 3)]
    assert windows("abcd", 3) == [("a", "b", "c"), ("b", "c", "d")]


def test_whole_sequence():
    assert windows([1, 2], 2) == [(1, 2)]


def test_empty():
    assert windows([], 1) == []
