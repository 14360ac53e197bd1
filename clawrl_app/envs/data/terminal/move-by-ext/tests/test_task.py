from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_images():
    assert sorted(p.name for p in (W / 'images').iterdir()) == ['a.jpg', 'b.jpg']

def test_pdfs_and_rest():
    assert [p.name for p in (W / 'pdfs').iterdir()] == ['c.pdf']
    assert [p.name for p in (W / 'inbox').iterdir()] == ['notes.txt']
