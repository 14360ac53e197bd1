import pytest

from pager.pages import page, page_count


def test_exact_pages():
    assert page_count(9, 3) == 3


def test_page_items():
    assert page(list(range(10)), 2, 3) == [3, 4, 5]


def test_bad_per_page():
    with pytest.raises(ValueError):
        page_count(5, 0)
