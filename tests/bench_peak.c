/* tests/bench_peak.c — the CPU's measured arithmetic peak (cpu/peak.c) on every path this CPU
 * runs, at 1 thread and at --threads. Prints a table and one JSON line per row. Not a test: the
 * numbers are the machine's, and a shared machine lowers them (the load average is printed).
 *
 *   build/bench_peak [--threads N (2)] [--seconds S (1.0, per measurement)]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/peak.h"

static double loadavg(void) {
    double l = -1;
    FILE* f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

int main(int argc, char** argv) {
    int threads = 2;
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || !(seconds > 0)) {
        fprintf(stderr, "bench_peak: --threads must be >= 1 and --seconds > 0\n");
        return 2;
    }
    static const PeakPath paths[] = {PEAK_PORTABLE, PEAK_AVX2, PEAK_AVX512, PEAK_AVX512_BF16};
    printf("CPU peak (cpu/peak.c): fp32 path %s, load average %.2f at start\n",
           peak_path_name(peak_fp32_path()), loadavg());
    printf("%-12s %-5s %8s %14s\n", "path", "kind", "threads", "GFLOP/s");
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        PeakPath p = paths[i];
        if (!peak_path_supported(p)) {
            printf("%-12s %-5s %8s %14s\n", peak_path_name(p), p == PEAK_AVX512_BF16 ? "bf16" : "fp32",
                   "-", "not on this CPU");
            continue;
        }
        int ts[2] = {1, threads};
        for (int k = 0; k < (threads > 1 ? 2 : 1); k++) {
            double r = peak_path_gflops(p, ts[k], seconds);
            const char* kind = p == PEAK_AVX512_BF16 ? "bf16" : "fp32";
            printf("%-12s %-5s %8d %14.1f\n", peak_path_name(p), kind, ts[k], r);
            printf("{\"bench\":\"peak\",\"path\":\"%s\",\"kind\":\"%s\",\"threads\":%d,\"gflops\":%.2f,"
                   "\"seconds\":%.2f,\"loadavg\":%.2f}\n", peak_path_name(p), kind, ts[k], r, seconds,
                   loadavg());
        }
    }
    return 0;
}
