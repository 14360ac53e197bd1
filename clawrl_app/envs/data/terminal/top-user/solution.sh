set -e
cd /workspace
grep -o 'user=[a-z]*' events.log | cut -d= -f2 | sort | uniq -c | sort -rn | head -1 | awk '{print $2}' > answer.txt
