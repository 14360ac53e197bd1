set -e
cd /workspace
printf 'wc -l < "$1"\n' > count.sh
