set -e
cd /workspace
cd docs && for f in *.txt; do mv "$f" "${f%.txt}.md"; done
