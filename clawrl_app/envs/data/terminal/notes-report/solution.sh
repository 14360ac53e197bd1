set -e
cd /workspace
printf 'ls "$1" | grep -c "\\.txt$"\n' > report.sh
