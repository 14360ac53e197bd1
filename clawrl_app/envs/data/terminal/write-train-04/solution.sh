set -e
cd /workspace
echo 497 > answer.txt
