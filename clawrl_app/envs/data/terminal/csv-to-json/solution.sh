set -e
cd /workspace
python3 -c "import csv, json; rows = list(csv.DictReader(open('people.csv'))); json.dump([{'name': r['name'], 'age': int(r['age'])} for r in rows], open('people.json', 'w'))"
