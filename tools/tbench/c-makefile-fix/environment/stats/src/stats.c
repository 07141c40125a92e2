#include <math.h>
#include "stats.h"

struct summary summarize(const double *values, size_t n) {
    struct summary s = {n, 0.0, 0.0};
    if (n == 0) return s;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += values[i];
    s.mean = sum / (double)n;
    double sq = 0.0;
    for (size_t i = 0; i < n; i++) sq += (values[i] - s.mean) * (values[i] - s.mean);
    s.stddev = sqrt(sq / (double)n);
    return s;
}
