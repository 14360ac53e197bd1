from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_file_exists():
    assert (W / 'warnings.txt').is_file()

def test_lines():
    assert (W / 'warnings.txt').read_text().splitlines() == ['WARN low memory', 'WARN retrying', 'WARN giving up']
