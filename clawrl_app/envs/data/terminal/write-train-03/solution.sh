set -e
cd /workspace
echo candle > answer.txt
