from fuzzy.compare import same_text


def test_sharp_s():
    assert same_text("Straße", "STRASSE")
    assert same_text("Maße", "MASSE")


def test_not_equal_stays_false():
    assert not same_text("Straße", "STRASE")
