from wordstats.counts import word_counts


def test_counts():
    assert word_counts("to be or not to be") == {"to": 2, "be": 2, "or": 1, "not": 1}
