set -e
cd /workspace
tail -n +2 cities.csv | sort -t, -k2 -n | tail -1 | cut -d, -f1 > answer.txt
