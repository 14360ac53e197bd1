from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_file_exists():
    assert (W / 'keys.txt').is_file()

def test_content():
    assert (W / 'keys.txt').read_text().split() == ['debug', 'host', 'port', 'workers']
