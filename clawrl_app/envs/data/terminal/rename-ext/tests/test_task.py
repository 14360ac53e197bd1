from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_md_files():
    assert sorted(p.name for p in (W / 'docs').iterdir()) == ['faq.md', 'intro.md', 'usage.md']

def test_contents_kept():
    assert (W / 'docs' / 'usage.md').read_text() == 'usage\n'
