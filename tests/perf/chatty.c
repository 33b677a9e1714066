/* The chatty writer of writer.py (mode chatty), in C: the same lines on the same schedule for a
 * fraction of the CPU, so that 200 of them leave a 2-core machine to the supervisors being measured.
 * Compiled on first use into tests/perf/.cache (bench_chatty.py falls back to writer.py without cc).
 *
 *   chatty NAME RATE SECONDS GO HOLD
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_until(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void write_all(const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(1, p, n);
        if (k <= 0) exit(1);
        p += k;
        n -= (size_t)k;
    }
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: chatty NAME RATE SECONDS GO HOLD\n");
        return 2;
    }
    const char *name = argv[1];
    double rate = atof(argv[2]), seconds = atof(argv[3]), hold = atof(argv[5]);
    double start = 0;
    for (;;) {
        FILE *f = fopen(argv[4], "r");
        if (f) {
            int ok = fscanf(f, "%lf", &start) == 1;
            fclose(f);
            if (ok) break;
        }
        usleep(50000);
    }
    long total = (long)(rate * seconds);
    char pad[101];
    memset(pad, 'x', 100);
    pad[100] = 0;
    char line[256];
    for (long i = 0; i < total; i++) {
        double due = start + (double)i / rate;
        if (due > now()) sleep_until(due);
        /* f"{name} line {i:07d} {pad}"[:99] + "\n" */
        int n = snprintf(line, sizeof line, "%s line %07ld %s", name, i, pad);
        if (n > 99) n = 99;
        line[n] = '\n';
        write_all(line, (size_t)n + 1);
    }
    int n = snprintf(line, sizeof line, "END %s %ld t=%.6f\n", name, total, now());
    write_all(line, (size_t)n);
    sleep_until(now() + hold);
    return 0;
}
