set -e
git config --global user.name "Trip Planner"
git config --global user.email "planner@example.invalid"
git config --global init.defaultBranch main
export GIT_AUTHOR_DATE="2026-03-01T10:00:00Z" GIT_COMMITTER_DATE="2026-03-01T10:00:00Z"
mkdir -p trip && cd trip && git init -q
printf '# Packing list\n- passport\n- charger\n' > packing.md
printf 'Day 1: arrive\nDay 2: museum\n' > itinerary.txt
git add . && git commit -qm "Start the trip plan"
printf 'Day 1: arrive\nDay 2: museum\nDay 3: coast walk\n' > itinerary.txt
git commit -qam "Add day 3"
git checkout -q --detach HEAD
printf '# Packing list\n- passport\n- charger\n- rain jacket\n- walking boots\n' > packing.md
printf 'Budget: 640 EUR\n' > budget.txt
git add . && git commit -qm "Pack for the coast and set a budget"
git checkout -q main
