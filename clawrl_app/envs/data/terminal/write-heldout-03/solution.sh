set -e
cd /workspace
echo 856 > memo.txt
