#!/bin/bash
set -e
cd /app/stats
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -O2 -Wall -Isrc

bin/stats: build/main.o build/stats.o
	@mkdir -p bin
	$(CC) -o $@ $^ -lm

build/%.o: src/%.c src/stats.h
	@mkdir -p build
	$(CC) $(CFLAGS) -c $< -o $@

clean:
	rm -rf build bin
MK
make
