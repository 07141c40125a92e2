#!/bin/bash
SRC=$1
DEST=$2
count=0
for f in $(cd $SRC && find . -name *.txt -type f); do
  mkdir -p $DEST/$(dirname $f)
  cp $SRC/$f $DEST/$f
  count=$((count+1))
done
echo $count
