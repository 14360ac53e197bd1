set -e
cd /workspace
python3 -c "import csv, json, collections; c = collections.Counter(r['category'] for r in csv.DictReader(open('products.csv'))); json.dump(dict(c), open('counts.json', 'w'))"
