from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def run(*cmd, stdin=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin, timeout=20, cwd='/tmp')

def test_exists():
    assert (W / 'count.sh').is_file()

def test_counts():
    assert run('bash', str(W / 'count.sh'), str(W / 'sample.txt')).stdout.strip() == '3'
    Path('/tmp/five.txt').write_text('1\n2\n3\n4\n5\n')
    assert run('bash', str(W / 'count.sh'), '/tmp/five.txt').stdout.strip() == '5'
