from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def run(*cmd, stdin=None):
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin, timeout=20, cwd='/tmp')

def test_exists():
    assert (W / 'fizzbuzz.py').is_file()

def test_output():
    want = ['1','2','Fizz','4','Buzz','Fizz','7','8','Fizz','Buzz','11','Fizz','13','14','FizzBuzz']
    import sys
    assert run(sys.executable, str(W / 'fizzbuzz.py')).stdout.split() == want
