from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def run(*cmd, stdin=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin, timeout=20, cwd='/tmp')

def test_script_exists():
    assert (W / 'run.sh').is_file()

def test_output():
    assert run('bash', str(W / 'run.sh')).stdout == 'Hello, World!\n'
