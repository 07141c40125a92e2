#!/bin/bash
cat > /app/top_words.sh <<'SH'
#!/bin/bash
# usage: top_words.sh FILE N
file=$1
n=$2
tr 'A-Z' 'a-z' < "$file" | tr -cs 'a-z' '\n' | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2,2 | head -n "$n" | awk '{print $1, $2}'
SH
chmod +x /app/top_words.sh
