from shorten.trunc import truncate


def test_example():
    assert truncate("hello world", 5) == "hell…"


def test_never_longer_than_width():
    for width in range(1, 12):
        assert len(truncate("hello world", width)) <= width


def test_custom_marker():
    assert truncate("abcdefgh", 6, marker="...") == "abc..."
