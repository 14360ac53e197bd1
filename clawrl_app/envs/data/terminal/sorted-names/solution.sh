set -e
cd /workspace
sort -u names.txt > sorted.txt
