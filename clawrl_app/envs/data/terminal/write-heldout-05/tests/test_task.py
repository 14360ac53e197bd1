from pathlib import Path

W = Path('/workspace')


def test_file_exists():
    assert (W / 'notes.txt').is_file()


def test_file_holds_the_value():
    assert (W / 'notes.txt').read_text().strip() == '517'
