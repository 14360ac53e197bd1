from grouping.groups import group_by


def test_groups_are_separate():
    words = ["apple", "avocado", "banana"]
    assert group_by(words, key=lambda w: w[0]) == {"a": ["apple", "avocado"], "b": ["banana"]}


def test_parity():
    assert group_by(range(5), key=lambda n: n % 2) == {0: [0, 2, 4], 1: [1, 3]}


def test_empty():
    assert group_by([], key=len) == {}
