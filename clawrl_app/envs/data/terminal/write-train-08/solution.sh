set -e
cd /workspace
echo forest > notes.txt
