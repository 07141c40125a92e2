#!/bin/bash
cd /app/docs
find . -type l | while read -r link; do
  target=$(readlink "$link")
  inner=${target#/srv/olddocs/}
  rel=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], os.path.dirname(sys.argv[2])))' "$inner" "${link#./}")
  ln -sfn "$rel" "$link"
done
