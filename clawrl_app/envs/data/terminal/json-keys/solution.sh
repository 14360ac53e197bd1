set -e
cd /workspace
python3 -c "import json; print('\n'.join(sorted(json.load(open('config.json')))))" > keys.txt
