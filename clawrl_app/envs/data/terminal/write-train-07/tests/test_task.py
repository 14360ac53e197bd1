from pathlib import Path

W = Path('/workspace')


def test_file_exists():
    assert (W / 'answer.txt').is_file()


def test_file_holds_the_value():
    assert (W / 'answer.txt').read_text().strip() == '492'
