set -e
cd /workspace
mkdir -p images pdfs && mv inbox/*.jpg images/ && mv inbox/*.pdf pdfs/
