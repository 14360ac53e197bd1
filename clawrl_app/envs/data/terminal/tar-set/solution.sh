set -e
cd /workspace
tar -czf archive.tar.gz reports/*.csv
