#!/bin/bash
set -e
cd /app/trip
lost=$(git reflog --format='%H %s' | awk '/Pack for the coast/ {print $1; exit}')
git merge -q --no-edit "$lost"
