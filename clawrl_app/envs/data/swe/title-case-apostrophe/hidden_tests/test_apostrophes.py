from headline.titles import title_case


def test_contraction():
    assert title_case("don't stop me now") == "Don't Stop Me Now"


def test_possessive():
    assert title_case("the cat's pyjamas") == "The Cat's Pyjamas"


def test_mixed_case_input():
    assert title_case("a TALE of two CITIES") == "A Tale of Two Cities"
