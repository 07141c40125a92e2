set -e
git config --global user.name "Service Dev"
git config --global user.email "dev@example.invalid"
git config --global init.defaultBranch main
export GIT_AUTHOR_DATE="2026-02-02T09:00:00Z" GIT_COMMITTER_DATE="2026-02-02T09:00:00Z"
mkdir service && cd service && git init -q
printf '[server]\nhost = 0.0.0.0\nport = 8080\nretries = 3\nbackoff_ms = 200\nlog_level = info\n' > service.ini
printf 'print("service")\n' > main.py
git add . && git commit -qm "Initial service"
git checkout -qb retry-tuning
printf '[server]\nhost = 0.0.0.0\nport = 8081\nretries = 5\nbackoff_ms = 350\nlog_level = info\n' > service.ini
git commit -qam "Tune retries"
printf 'RETRY_DOC = "exponential"\n' > retry.py && git add retry.py && git commit -qm "Document retry policy"
git checkout -q main
printf '[server]\nhost = 0.0.0.0\nport = 9090\nretries = 2\nbackoff_ms = 200\nlog_level = info\n' > service.ini
git commit -qam "Move to port 9090"
