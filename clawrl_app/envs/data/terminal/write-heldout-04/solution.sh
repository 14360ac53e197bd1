set -e
cd /workspace
echo rocket > answer.txt
