from batching.chunks import chunks


def test_fill_pads_the_last_chunk():
    assert chunks([1, 2, 3], 2, fill=0) == [[1, 2], [3, 0]]
    assert chunks("abcd", 3, fill="-") == [["a", "b", "c"], ["d", "-", "-"]]


def test_fill_none_pads_with_none():
    assert chunks([1, 2, 3], 2, fill=None) == [[1, 2], [3, None]]


def test_fill_exact_size_adds_nothing():
    assert chunks([1, 2], 2, fill=0) == [[1, 2]]


def test_without_fill_unchanged():
    assert chunks([1, 2, 3], 2) == [[1, 2], [3]]
