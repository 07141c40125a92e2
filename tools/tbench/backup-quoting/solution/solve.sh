#!/bin/bash
cat > /app/backup.sh <<'SH'
#!/bin/bash
SRC=$1
DEST=$2
count=0
while IFS= read -r -d '' f; do
  mkdir -p -- "$DEST/$(dirname -- "$f")"
  cp -- "$SRC/$f" "$DEST/$f"
  count=$((count+1))
done < <(cd -- "$SRC" && find . -type f -name '*.txt' -print0)
echo "$count"
SH
chmod +x /app/backup.sh
