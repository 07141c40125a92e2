#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_field(const char *line, int want) {
    char field[16];
    int col = 1, j = 0;
    for (const char *p = line; *p && *p != '\n'; p++) {
        if (*p == ',') {
            if (col == want) break;
            col++;
            j = 0;
            continue;
        }
        if (col == want) field[j++] = *p;
    }
    if (col == want) {
        field[j] = '\0';
        printf("%s\n", field);
    } else {
        printf("%s\n", field);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: csvcut N\n");
        return 2;
    }
    int want = atoi(argv[1]);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        print_field(line, want);
    }
    return 0;
}
