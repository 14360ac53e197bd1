from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_names():
    assert sorted(p.name for p in (W / 'mixed').iterdir()) == ['data.csv', 'photo.jpg', 'readme.txt']

def test_content_kept():
    assert (W / 'mixed' / 'readme.txt').read_text() == 'r'
