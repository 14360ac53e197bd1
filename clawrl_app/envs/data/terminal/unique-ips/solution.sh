set -e
cd /workspace
awk '{print $1}' access.log | sort -u | wc -l > answer.txt
