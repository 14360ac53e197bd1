from confmerge.merge import deep_merge


def test_nested_merge():
    base = {"a": 1, "db": {"host": "x", "port": 1}}
    merged = deep_merge(base, {"db": {"port": 2}, "b": 3})
    assert merged == {"a": 1, "db": {"host": "x", "port": 2}, "b": 3}
