#!/bin/bash
cd /tests
python3 -m unittest -q test_roman
if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
