set -e
git config --global user.name "Pricing Dev"
git config --global user.email "pricing@example.invalid"
git config --global init.defaultBranch main
mkdir pricing && cd pricing && git init -q
cat > check.py <<'PY'
from pricing import price
assert price(100, "gold") == 80, price(100, "gold")
assert price(100, "silver") == 90
assert price(0, "gold") == 0
print("ok")
PY
n=0
commit() { n=$((n+1)); export GIT_AUTHOR_DATE="2026-01-01T00:$(printf %02d $n):00Z" GIT_COMMITTER_DATE="2026-01-01T00:$(printf %02d $n):00Z"; git add -A; git commit -qm "$1"; }
printf '__pycache__/\n' > .gitignore
printf 'RATES = {"gold": 20, "silver": 10}\n\ndef price(amount, tier):\n    return amount - amount * RATES.get(tier, 0) // 100\n' > pricing.py
commit "Tiered pricing"
for i in $(seq 1 23); do
  echo "# note $i" >> NOTES.md
  if [ $i -eq 14 ]; then
    sed -i 's/"gold": 20/"gold": 2/' pricing.py
    commit "Tune rates for spring campaign ($i)"
  elif [ $i -eq 17 ]; then
    printf '\ndef describe(tier):\n    return tier.title()\n' >> pricing.py
    commit "Add describe() ($i)"
  else
    commit "Update notes ($i)"
  fi
done
