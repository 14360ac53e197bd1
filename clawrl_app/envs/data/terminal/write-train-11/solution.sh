set -e
cd /workspace
echo orange > memo.txt
