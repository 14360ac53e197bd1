from fuzzy.compare import same_text


def test_case_and_spaces():
    assert same_text("  Hello", "hello ")


def test_different():
    assert not same_text("hello", "help")
