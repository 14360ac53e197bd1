set -e
cd /workspace
grep -hw ERROR logs/*.log | wc -l > answer.txt
