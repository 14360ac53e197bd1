from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_answer_exists():
    assert (W / 'answer.txt').is_file()

def test_answer_value():
    assert (W / 'answer.txt').read_text().strip() == '8'
