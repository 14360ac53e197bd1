set -e
cd /workspace
grep WARN app.log > warnings.txt
