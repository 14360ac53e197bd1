set -e
cd /workspace
echo pencil > notes.txt
