set -e
cd /workspace
echo 131 > answer.txt
