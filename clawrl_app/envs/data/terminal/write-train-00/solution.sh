set -e
cd /workspace
echo apple > answer.txt
