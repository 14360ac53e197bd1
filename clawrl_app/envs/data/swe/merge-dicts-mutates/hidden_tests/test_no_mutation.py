from confmerge.merge import deep_merge


def test_base_is_not_modified():
    base = {"a": 1, "db": {"host": "x", "port": 1}}
    deep_merge(base, {"db": {"port": 2}, "b": 3})
    assert base == {"a": 1, "db": {"host": "x", "port": 1}}


def test_defaults_are_reusable():
    defaults = {"ui": {"theme": "light"}}
    first = deep_merge(defaults, {"ui": {"font": "mono"}})
    second = deep_merge(defaults, {"ui": {"theme": "dark"}})
    assert first == {"ui": {"theme": "light", "font": "mono"}}
    assert second == {"ui": {"theme": "dark"}}
