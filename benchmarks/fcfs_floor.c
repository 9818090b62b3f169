/* A plain C FCFS, the floor the compiled FCFS kernel is measured against (bench_fcfs.py).
 *
 * Reads from stdin: n, capacity (int64 each), then submit[n], runtime[n] (float64) and procs[n]
 * (int64), jobs in submission order. Simulates first come, first served on `capacity` processors
 * with the engine's rules: at each time t, the jobs ending by t free their processors, the jobs
 * submitted by t join the queue, then the queue head starts while it fits (the head blocks the
 * rest). Running jobs sit in a binary min-heap of end times. Prints the sum of the end times (a
 * checksum the benchmark compares with the kernel's records) and the CPU seconds of the loop
 * alone (reading the input excluded).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct { double f; int64_t j; } Item;

static void push(Item *h, int64_t *n, Item x)
{
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (h[p].f <= x.f) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static Item pop(Item *h, int64_t *n)
{
    Item top = h[0], last = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].f < h[c].f) c++;
        if (last.f <= h[c].f) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

int main(void)
{
    int64_t n, capacity;
    if (fread(&n, 8, 1, stdin) != 1 || fread(&capacity, 8, 1, stdin) != 1) return 2;
    double *submit = malloc(n * 8), *runtime = malloc(n * 8), *end = malloc(n * 8);
    int64_t *procs = malloc(n * 8);
    Item *heap = malloc((n + 1) * sizeof(Item));
    if (fread(submit, 8, n, stdin) != (size_t)n || fread(runtime, 8, n, stdin) != (size_t)n
        || fread(procs, 8, n, stdin) != (size_t)n) return 2;
    clock_t c0 = clock();
    int64_t hn = 0, used = 0, head = 0, arrived = 0;
    while (head < n) {
        double t = arrived < n ? submit[arrived] : INFINITY;
        if (hn && heap[0].f < t) t = heap[0].f;
        while (hn && heap[0].f <= t) used -= procs[pop(heap, &hn).j];
        while (arrived < n && submit[arrived] <= t) arrived++;
        while (head < arrived && procs[head] <= capacity - used) {
            used += procs[head];
            end[head] = t + runtime[head];
            push(heap, &hn, (Item){end[head], head});
            head++;
        }
    }
    double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) sum += end[j];
    printf("%.17g %.9f\n", sum, cpu);
    return 0;
}
