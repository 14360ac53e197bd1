from inventory.store import Inventory


def test_add_and_count():
    inv = Inventory("fruit", ["pear"])
    inv.add("apple").add("plum")
    assert inv.count() == 3
    assert inv.items == ["pear", "apple", "plum"]
