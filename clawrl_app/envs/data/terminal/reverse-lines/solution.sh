set -e
cd /workspace
printf 'import sys\nfor line in reversed(sys.stdin.read().splitlines()):\n    print(line)\n' > reverse.py
