from pathlib import Path

W = Path('/workspace')


def test_file_exists():
    assert (W / 'entry.txt').is_file()


def test_file_holds_the_value():
    assert (W / 'entry.txt').read_text().strip() == '742'
