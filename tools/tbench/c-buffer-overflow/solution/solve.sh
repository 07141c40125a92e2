#!/bin/bash
set -e
cd /app/csvcut
cat > csvcut.c <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_field(const char *line, size_t len, int want) {
    int col = 1;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || line[i] == ',' || line[i] == '\n') {
            if (col == want) {
                fwrite(line + start, 1, i - start, stdout);
                break;
            }
            if (i == len || line[i] == '\n') break;
            col++;
            start = i + 1;
        }
    }
    putchar('\n');
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: csvcut N\n");
        return 2;
    }
    int want = atoi(argv[1]);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) != -1) {
        print_field(line, (size_t)n, want);
    }
    free(line);
    return 0;
}
C
make -s
