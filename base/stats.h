/* Summary statistics of a sample of doubles (the repeats of a timed kernel, a log record's times): one definition
 * of the median and the spread for every place that reports them.
 *
 * The median of an even count is the mean of the two middle values. A sample holding a NaN has no meaningful
 * order: its median, min and max are NaN (nnan says how many there were), so that a corrupted time can never
 * pass for a plausible one. An empty sample gives zeros. */
#ifndef KG_STATS_H
#define KG_STATS_H

typedef struct kg_stats {
  int n;        /* values summarized */
  int nnan;     /* of them NaN */
  double median, min, max;
  double spread; /* (max - min) / median; 0 when the median is not positive */
} kg_stats;

/* The statistics of x[0..n). x is left as it is: the values are sorted in a private copy (one allocation of n
 * doubles, released before returning; none when n <= 64). */
kg_stats kg_stats_of(const double *x, int n);
#endif
