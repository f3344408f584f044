/* layer_team.h — internal: how many threads a forward runs on while its cores are shared. */
#ifndef MOE_LAYER_LAYER_TEAM_H
#define MOE_LAYER_LAYER_TEAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * A forward's steps end in barriers, so a team waits at each for its slowest thread. When one
 * of the cores is busy with other work (another process, PyTorch's own threads in the same
 * one), the thread scheduled there runs only in time slices, and every barrier can cost a
 * slice of that other work: measured, one of two cores busy took a two-thread gpt-oss-20b
 * decode step from 4.3 ms to 40 ms. The layer watches for it: every thread reads how long it
 * sat runnable on a run queue during the forward, not running (the kernel's schedstat: a
 * thread preempted by the other work, or woken at a barrier behind it), and the team's total
 * against the forward's wall time says whether the cores were shared (moe_team_shared). Two
 * shared forwards of the last three on all the threads make the next ones run on one thread
 * fewer, and all the threads are tried again after a pause that doubles (10 ms to 1 s) while
 * the probe finds them shared too and resets when it does not. The thread count changes no
 * bit of any result (principle 7), so this is a matter of time only. options->fixed_threads
 * turns it off (benchmarks). Where the kernel keeps no schedstat, the wait reads as zero and
 * the team keeps all its threads.
 */
typedef struct moe_team {
    int full;              /* the layer's threads */
    bool fixed;            /* options->fixed_threads */
    atomic_int size;       /* the team size forwards use now, in [1, full] */
    atomic_llong probe_at; /* CLOCK_MONOTONIC ns after which a forward tries full again */
    atomic_llong backoff;  /* ns from a preempted forward to the next probe */
    atomic_uint recent;    /* the last three full-team forwards, a bit each: 1 = shared */
} moe_team;

#define MOE_TEAM_BACKOFF_MIN_NS 10000000LL   /* 10 ms */
#define MOE_TEAM_BACKOFF_MAX_NS 1000000000LL /* 1 s */
#define MOE_TEAM_EVIDENCE 2 /* shared of the last three full-team forwards: a thread fewer */

void moe_team_init(moe_team *t, int full, bool fixed);

/* The number of threads for a forward starting at NOW_NS (CLOCK_MONOTONIC): the current size,
 * or all of them when a probe is due. */
int moe_team_size(moe_team *t, long long now_ns);

/* True when forwards must watch their threads (more than one, not fixed). */
static inline bool moe_team_watching(const moe_team *t) { return !t->fixed && t->full > 1; }

/* The calling thread's time runnable but not running so far, in ns (0 where the kernel does
 * not keep it). */
long long moe_team_waited_ns(void);

/* Whether a forward of NS wall time whose threads waited WAITED_NS in all on run queues ran on
 * shared cores: at least MOE_TEAM_WAIT_MIN_NS, and at least 1/MOE_TEAM_WAIT_SHARE of the wall
 * time. On a quiet machine the wait is wake-up latency at the barriers; with one of two cores
 * busy the thread there waits for the other work's slices (bench/NOTES.md v21 has both). */
bool moe_team_shared(long long waited_ns, long long ns);

#define MOE_TEAM_WAIT_MIN_NS 100000LL /* 0.1 ms */
#define MOE_TEAM_WAIT_SHARE 8

/* After a forward on USED threads, SHARED as moe_team_shared said, ending at NOW_NS. */
void moe_team_report(moe_team *t, int used, bool shared, long long now_ns);

/* CLOCK_MONOTONIC in ns. */
long long moe_team_now_ns(void);

#endif
