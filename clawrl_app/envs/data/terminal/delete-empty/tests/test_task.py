from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_empty_gone():
    assert not (W / 'data' / 'b.txt').exists() and not (W / 'data' / 'd.log').exists()

def test_others_kept():
    assert sorted(p.name for p in (W / 'data').iterdir()) == ['a.txt', 'c.txt']
