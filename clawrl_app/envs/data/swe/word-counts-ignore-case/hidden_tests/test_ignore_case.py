from wordstats.counts import word_counts


def test_ignore_case():
    assert word_counts("The the THE cat", ignore_case=True) == {"the": 3, "cat": 1}


def test_default_is_case_sensitive():
    assert word_counts("The the") == {"The": 1, "the": 1}
