set -e
cd /workspace
cd mixed && for f in *; do l=$(echo "$f" | tr A-Z a-z); [ "$f" = "$l" ] || mv "$f" "$l"; done
