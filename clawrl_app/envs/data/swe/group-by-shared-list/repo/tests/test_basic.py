from grouping.groups import group_by


def test_single_group():
    assert group_by([1, 3, 5], key=lambda n: n % 2) == {1: [1, 3, 5]}
