/* layer_team.c — fewer threads while a forward's cores are shared, and probes back to all. */
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "layer/layer_team.h"

long long moe_team_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void moe_team_init(moe_team *t, int full, bool fixed)
{
    t->full = full;
    t->fixed = fixed;
    atomic_init(&t->size, full);
    atomic_init(&t->probe_at, 0);
    atomic_init(&t->backoff, MOE_TEAM_BACKOFF_MIN_NS);
    atomic_init(&t->recent, 0u);
}

int moe_team_size(moe_team *t, long long now_ns)
{
    const int size = atomic_load_explicit(&t->size, memory_order_relaxed);
    if (size >= t->full || t->fixed) return t->full;
    return now_ns >= atomic_load_explicit(&t->probe_at, memory_order_relaxed) ? t->full : size;
}

long long moe_team_waited_ns(void)
{
    /* "time on the cpu, time runnable on a run queue, time slices", in ns (CONFIG_SCHED_INFO,
     * which common distribution kernels enable). */
    char text[96];
    const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    unsigned long long run, wait;
    return sscanf(text, "%llu %llu", &run, &wait) == 2 ? (long long)wait : 0;
}

bool moe_team_shared(long long waited_ns, long long ns)
{
    return waited_ns >= MOE_TEAM_WAIT_MIN_NS && waited_ns * MOE_TEAM_WAIT_SHARE >= ns;
}

/* Of the last three full-team forwards (a bit each, 1 = shared), how many were. */
static int shared_of_last_three(unsigned h)
{
    return (int)(h & 1u) + (int)(h >> 1 & 1u) + (int)(h >> 2 & 1u);
}

void moe_team_report(moe_team *t, int used, bool shared, long long now_ns)
{
    if (!moe_team_watching(t)) return;
    const bool probe = atomic_load_explicit(&t->size, memory_order_relaxed) < used;
    if (used == t->full && !probe) {
        const unsigned h =
            (atomic_load_explicit(&t->recent, memory_order_relaxed) << 1 | shared) & 7u;
        atomic_store_explicit(&t->recent, h, memory_order_relaxed);
        if (shared && shared_of_last_three(h) < MOE_TEAM_EVIDENCE) return;
    }
    if (shared && used > 1) {
        /* From the full team in steady state: the shortest pause; a probe that found the cores
         * shared again: twice the last one. */
        long long pause = atomic_load_explicit(&t->backoff, memory_order_relaxed);
        pause = !probe                                ? MOE_TEAM_BACKOFF_MIN_NS
                : pause * 2 > MOE_TEAM_BACKOFF_MAX_NS ? MOE_TEAM_BACKOFF_MAX_NS
                                                      : pause * 2;
        atomic_store_explicit(&t->recent, 0u, memory_order_relaxed);
        atomic_store_explicit(&t->backoff, pause, memory_order_relaxed);
        atomic_store_explicit(&t->probe_at, now_ns + pause, memory_order_relaxed);
        atomic_store_explicit(&t->size, used - 1, memory_order_relaxed);
    } else if (!shared && used == t->full) {
        atomic_store_explicit(&t->backoff, MOE_TEAM_BACKOFF_MIN_NS, memory_order_relaxed);
        atomic_store_explicit(&t->size, t->full, memory_order_relaxed);
    }
}
