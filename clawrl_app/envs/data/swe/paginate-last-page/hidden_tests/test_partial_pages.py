from pager.pages import page, page_count


def test_partial_last_page():
    assert page_count(10, 3) == 4
    assert page(list(range(10)), page_count(10, 3), 3) == [9]


def test_fewer_items_than_a_page():
    assert page_count(1, 10) == 1


def test_no_items():
    assert page_count(0, 5) == 0
