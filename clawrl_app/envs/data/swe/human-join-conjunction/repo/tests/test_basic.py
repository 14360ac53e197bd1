from listfmt.join import human_join


def test_and():
    assert human_join(["a", "b", "c"]) == "a, b and c"
    assert human_join([]) == ""
