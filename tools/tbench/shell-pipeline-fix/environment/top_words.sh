#!/bin/bash
# usage: top_words.sh FILE N
file=$1
n=$2
cat $file | tr " " "\n" | uniq -c | sort -n | head -n $n
