from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def mode(p):
    return stat.S_IMODE((W / 'scripts' / p).stat().st_mode)

def test_scripts_755():
    assert mode('build.sh') == 0o755 and mode('deploy.sh') == 0o755

def test_key_600():
    assert mode('secret.key') == 0o600
