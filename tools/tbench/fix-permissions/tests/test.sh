#!/bin/bash
cd /app/deploy || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
want() { m=$(stat -c %a "$1"); [ "$m" = "$2" ] || { echo "$1 is $m, want $2"; ok=0; }; }
want . 750; want bin 750; want config 750
want bin/run.sh 755; want bin/check.sh 755
want config/secrets.env 600; want config/app.conf 644; want config/logging.conf 644
[ "$(ls bin config | tr '\n' ' ')" = "bin: check.sh run.sh  config: app.conf logging.conf secrets.env " ] || { echo "files added or removed"; ok=0; }
grep -q hunter2 config/secrets.env && grep -q replicas=2 config/app.conf || { echo "contents changed"; ok=0; }
[ "$(./bin/run.sh 2>&1)" = "deploy ok" ] || { echo "run.sh does not work"; ok=0; }
echo $ok > /logs/verifier/reward.txt
