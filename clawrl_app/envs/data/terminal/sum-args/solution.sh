set -e
cd /workspace
printf 's=0\nfor n in "$@"; do s=$((s + n)); done\necho $s\n' > sum.sh
