from pathlib import Path

W = Path('/workspace')


def test_file_exists():
    assert (W / 'memo.txt').is_file()


def test_file_holds_the_value():
    assert (W / 'memo.txt').read_text().strip() == '856'
