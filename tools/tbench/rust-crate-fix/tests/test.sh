#!/bin/bash
cd /app/wordcount || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
export CARGO_TARGET_DIR=/tmp/verify-target
cargo build --offline -q 2>/tmp/build.err || { echo "build failed"; cat /tmp/build.err; ok=0; }
grep -q '^\[dependencies\]' Cargo.toml && [ -z "$(sed -n '/^\[dependencies\]/,/^\[/p' Cargo.toml | grep -v '^\[' | grep -v '^\s*$')" ] || { echo "dependencies added"; ok=0; }
out=$(printf 'The cat; the DOG. the Cat? a dog, an owl!\nOwl owl bee' | /tmp/verify-target/debug/wordcount)
expect=$(printf 'owl 3\nthe 3\ncat 2')
[ "$out" = "$expect" ] || { echo "wrong output: $out"; ok=0; }
echo $ok > /logs/verifier/reward.txt
