set -e
cd /workspace
chmod 755 scripts/*.sh && chmod 600 scripts/secret.key
