from inventory.store import Inventory


def test_defaults_are_independent():
    a = Inventory("a")
    b = Inventory("b")
    a.add("apple")
    assert b.count() == 0
    assert a.count() == 1


def test_callers_list_is_not_changed():
    mine = ["pear"]
    Inventory("x", items=mine).add("apple")
    assert mine == ["pear"]


def test_initial_items():
    assert Inventory("x", ("a", "b")).count() == 2
