set -e
cd /workspace
find data -type f -empty -delete
