#include <stdio.h>
#include "stats.h"

int main(void) {
    double values[4096];
    size_t n = 0;
    while (n < 4096 && scanf("%lf", &values[n]) == 1) {
        n++;
    }
    struct summary s = summarize(values, n);
    printf("count=%zu mean=%.3f stddev=%.3f\n", s.count, s.mean, s.stddev);
    return 0;
}
