from headline.titles import title_case


def test_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"


def test_single_word():
    assert title_case("hello") == "Hello"
