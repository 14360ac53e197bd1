set -e
cd /workspace
python3 -c "import json; json.dump([i['name'] for i in json.load(open('items.json')) if i['price'] < 10], open('cheap.json', 'w'))"
