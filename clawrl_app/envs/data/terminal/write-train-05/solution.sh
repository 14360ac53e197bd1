set -e
cd /workspace
echo silver > memo.txt
