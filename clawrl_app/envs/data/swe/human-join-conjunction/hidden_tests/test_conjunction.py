from listfmt.join import human_join


def test_or():
    assert human_join(["tea", "coffee", "juice"], conjunction="or") == "tea, coffee or juice"


def test_two_items_or():
    assert human_join(["tea", "coffee"], conjunction="or") == "tea or coffee"


def test_default_and():
    assert human_join([1, 2]) == "1 and 2"
