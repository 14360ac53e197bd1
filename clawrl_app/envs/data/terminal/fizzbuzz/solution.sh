set -e
cd /workspace
cat > fizzbuzz.py <<'EOF'
for i in range(1, 16):
    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)
EOF
