#!/bin/bash
cat > /tmp/expected.env <<'ENV'
APP_NAME=shop-dev
CACHE_DIR=/var/lib/shop-dev/cache
DATABASE_URL=postgres://db.internal:5432/shop-dev
DATA_DIR=/var/lib/shop-dev
GREETING=hello from shop-dev on 127.0.0.1:80
HOST=127.0.0.1
LOG_FORMAT=${level} ${message}
MISSING=x
PORT=80
WORKERS=8
ENV
if cmp -s /tmp/expected.env /app/final.env; then echo 1; else diff /tmp/expected.env /app/final.env; echo 0; fi | tail -1 > /logs/verifier/reward.txt
