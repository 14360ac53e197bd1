set -e
cd /workspace
echo violet > answer.txt
