#!/bin/bash
python3 /tests/check_csvcut.py
if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
