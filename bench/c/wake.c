/* What one wakeup costs: two processes pass one byte back and forth over two pipes,
 * each sleeping in read() until the other writes. Prints the woken side's CPU time
 * (user + system, from getrusage) per round trip, in microseconds.
 * usage: wake ROUND_TRIPS PACE_US   (PACE_US 1000: one handover per millisecond) */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: wake ROUND_TRIPS PACE_US\n"); return 2; }
    int n = atoi(argv[1]), pace_us = atoi(argv[2]), a[2], b[2];
    char c = 'x';
    if (pipe(a) || pipe(b)) { perror("pipe"); return 1; }
    if (fork() == 0) {
        for (int i = 0; i < n; i++) { if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1) _exit(1); }
        _exit(0);
    }
    struct timespec ts = {0, pace_us * 1000L};
    for (int i = 0; i < n; i++) {
        if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1;
        if (pace_us) nanosleep(&ts, 0);
    }
    int st; struct rusage ru;
    wait4(-1, &st, 0, &ru);
    double child = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    printf("%.2f\n", child / n);
    return 0;
}
