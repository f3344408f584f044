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
 * decode step from 4.3 ms to 40 ms. The layer watches for it: every thread counts its
 * involuntary context switches (the kernel preempting it) over the forward
 * (moe_team_preempted says when they are many enough to count). Two preempted forwards of the
 * last three on all the threads make the next ones run on one thread fewer, and all the
 * threads are tried again after a pause that doubles (10 ms to 1 s) while the probe is
 * preempted too and resets when it is not. The
 * thread count changes no bit of any result (principle 7), so this is a matter of time only.
 * options->fixed_threads turns it off (benchmarks). A limit (bench/NOTES.md v20): a switch
 * counts a thread preempted while running, not one left waiting on the run queue after a
 * barrier wakes it, so a busy core is not always seen.
 */
typedef struct moe_team {
    int full;             /* the layer's threads */
    bool fixed;           /* options->fixed_threads */
    atomic_int size;      /* the team size forwards use now, in [1, full] */
    atomic_llong probe_at; /* CLOCK_MONOTONIC ns after which a forward tries full again */
    atomic_llong backoff; /* ns from a preempted forward to the next probe */
    atomic_uint recent;   /* the last three full-team forwards, a bit each: 1 = preempted */
} moe_team;

#define MOE_TEAM_BACKOFF_MIN_NS 10000000LL  /* 10 ms */
#define MOE_TEAM_BACKOFF_MAX_NS 1000000000LL /* 1 s */
#define MOE_TEAM_EVIDENCE 2 /* preempted of the last three full-team forwards: a thread fewer */

void moe_team_init(moe_team *t, int full, bool fixed);

/* The number of threads for a forward starting at NOW_NS (CLOCK_MONOTONIC): the current size,
 * or all of them when a probe is due. */
int moe_team_size(moe_team *t, long long now_ns);

/* True when forwards must count preemptions (more than one thread, not fixed). */
static inline bool moe_team_watching(const moe_team *t) { return !t->fixed && t->full > 1; }

/* The calling thread's involuntary context switches so far (0 where they cannot be read). */
long moe_team_preemptions(void);

/* Whether COUNT preemptions in all of a forward's threads over NS of wall time count as a
 * preempted forward: at least one, and one more per MOE_TEAM_SLICE_NS. Something preempts a
 * thread now and then on any machine, so a long forward always sees a few (on a quiet machine
 * a 28 ms DeepSeek-V3-width step nearly always did); a busy core preempts a running thread at
 * every time slice of the other work. */
bool moe_team_preempted(long count, long long ns);

#define MOE_TEAM_SLICE_NS 8000000LL /* 8 ms */

/* After a forward on USED threads that were preempted PREEMPTED times in all (0 when
 * moe_team_preempted said no), ending at NOW_NS. */
void moe_team_report(moe_team *t, int used, long preempted, long long now_ns);

/* CLOCK_MONOTONIC in ns. */
long long moe_team_now_ns(void);

#endif
