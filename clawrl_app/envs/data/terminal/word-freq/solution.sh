set -e
cd /workspace
tr ' ' '\n' < text.txt | grep -v '^$' | sort | uniq -c | sort -rn | head -1 | awk '{print $2}' > answer.txt
