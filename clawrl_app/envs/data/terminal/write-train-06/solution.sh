set -e
cd /workspace
echo river > answer.txt
