from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_archive_exists():
    assert tarfile.is_tarfile(W / 'archive.tar.gz')

def test_members():
    with tarfile.open(W / 'archive.tar.gz', 'r:gz') as t:
        assert sorted(m.name for m in t.getmembers() if m.isfile()) == ['reports/q1.csv', 'reports/q2.csv']
