set -e
cd /workspace
echo window > answer.txt
