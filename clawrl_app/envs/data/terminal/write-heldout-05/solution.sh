set -e
cd /workspace
echo 517 > notes.txt
