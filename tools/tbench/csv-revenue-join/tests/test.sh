#!/bin/bash
# Hand-computed: UNKNOWN 100.00; SG 45.005->45.01; PT 20+9=29.00; NL 12.50+9.90=22.40; DE 10.005+0.01=10.015->10.02
expected=$'country,orders,revenue\nUNKNOWN,1,100.00\nSG,1,45.01\nPT,2,29.00\nNL,2,22.40\nDE,2,10.02'
got=$(cat /app/revenue.csv 2>/dev/null)
if [ "$got" = "$expected" ] && [ "$(tail -c1 /app/revenue.csv | od -An -c | tr -d ' ')" = '\n' ]; then echo 1; else echo "got: $got"; echo 0; fi | tail -1 > /logs/verifier/reward.txt
