#ifndef STATS_H
#define STATS_H
#include <stddef.h>
struct summary { size_t count; double mean; double stddev; };
struct summary summarize(const double *values, size_t n);
#endif
