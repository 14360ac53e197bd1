set -e
cd /workspace
echo 147 > answer.txt
