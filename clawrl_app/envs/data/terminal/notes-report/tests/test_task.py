from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def run(*cmd, stdin=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin, timeout=20, cwd='/tmp')

def test_exists():
    assert (W / 'report.sh').is_file()

def test_counts():
    assert run('bash', str(W / 'report.sh'), str(W / 'notes')).stdout.strip() == '2'
    os.makedirs('/tmp/n2', exist_ok=True)
    for i in range(4):
        Path(f'/tmp/n2/{i}.txt').write_text('x')
    assert run('bash', str(W / 'report.sh'), '/tmp/n2').stdout.strip() == '4'
