#!/bin/bash
cd /app/service
git merge --no-ff retry-tuning -m "Merge retry-tuning" >/dev/null 2>&1
printf '[server]\nhost = 0.0.0.0\nport = 9090\nretries = 5\nbackoff_ms = 350\nlog_level = info\n' > service.ini
git add service.ini
git -c core.editor=true commit -q --no-edit
