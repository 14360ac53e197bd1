from shorten.trunc import truncate


def test_fits():
    assert truncate("hi", 5) == "hi"
    assert truncate("hello", 5) == "hello"
