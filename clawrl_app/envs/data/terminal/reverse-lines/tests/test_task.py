from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def run(*cmd, stdin=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin, timeout=20, cwd='/tmp')

def test_exists():
    assert (W / 'reverse.py').is_file()

def test_reverses():
    import sys
    assert run(sys.executable, str(W / 'reverse.py'), stdin='a\nb\nc\n').stdout.split() == ['c', 'b', 'a']
