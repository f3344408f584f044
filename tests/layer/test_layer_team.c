/* test_layer_team.c — fewer threads after forwards on shared cores, probes with a doubling pause,
 * same bits. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "fwd_io.h"

#define MS 1000000LL

/* The policy of layer_team.h, step by step on a made-up clock. */
static void check_policy(void)
{
    moe_team t;
    moe_team_init(&t, 2, false);
    CHECK(moe_team_watching(&t));
    CHECK(moe_team_size(&t, 0) == 2);
    moe_team_report(&t, 2, false, 1 * MS); /* quiet: stays at two */
    CHECK(moe_team_size(&t, 2 * MS) == 2);
    moe_team_report(&t, 2, true, 5 * MS); /* shared once, then twice quiet: no evidence */
    CHECK(moe_team_size(&t, 5 * MS) == 2);
    moe_team_report(&t, 2, false, 6 * MS);
    moe_team_report(&t, 2, false, 6 * MS);
    moe_team_report(&t, 2, true, 7 * MS); /* the earlier one is three forwards back now */
    CHECK(moe_team_size(&t, 7 * MS) == 2);
    moe_team_report(&t, 2, true, 10 * MS); /* two of the last three: one thread for 10 ms */
    CHECK(moe_team_size(&t, 10 * MS) == 1);
    CHECK(moe_team_size(&t, 20 * MS - 1) == 1);
    CHECK(moe_team_size(&t, 20 * MS) == 2); /* the probe */
    moe_team_report(&t, 2, true, 21 * MS);  /* the probe finds them shared too: 20 ms */
    CHECK(moe_team_size(&t, 40 * MS) == 1);
    CHECK(moe_team_size(&t, 41 * MS) == 2);
    moe_team_report(&t, 1, false, 42 * MS); /* a one-thread forward changes nothing */
    CHECK(moe_team_size(&t, 41 * MS - 1) == 1);
    moe_team_report(&t, 2, true, 50 * MS); /* 40 ms */
    CHECK(moe_team_size(&t, 90 * MS - 1) == 1 && moe_team_size(&t, 90 * MS) == 2);
    for (long long now = 100 * MS; now < 100000 * MS; now += 1000 * MS)
        moe_team_report(&t, 2, true, now); /* the pause stops growing at 1 s */
    CHECK(atomic_load(&t.backoff) == MOE_TEAM_BACKOFF_MAX_NS);
    moe_team_report(&t, 2, false, 200000 * MS); /* a quiet probe: all threads, shortest pause */
    CHECK(moe_team_size(&t, 200000 * MS) == 2);
    CHECK(atomic_load(&t.backoff) == MOE_TEAM_BACKOFF_MIN_NS);
    moe_team_report(&t, 2, true, 300000 * MS);
    CHECK(moe_team_size(&t, 300000 * MS) == 2); /* one shared forward is no evidence */
    moe_team_report(&t, 2, true, 300000 * MS);
    CHECK(moe_team_size(&t, 300000 * MS + 10 * MS - 1) == 1);

    /* Shared, quiet, shared: two of the last three. */
    moe_team_init(&t, 2, false);
    moe_team_report(&t, 2, true, 0);
    moe_team_report(&t, 2, false, 0);
    CHECK(moe_team_size(&t, 0) == 2);
    moe_team_report(&t, 2, true, 0);
    CHECK(moe_team_size(&t, 0) == 1);

    /* Three threads step down one at a time: on evidence with all of them, then at once. */
    moe_team_init(&t, 3, false);
    moe_team_report(&t, 3, true, 0);
    CHECK(moe_team_size(&t, 1) == 3);
    moe_team_report(&t, 3, true, 0);
    CHECK(moe_team_size(&t, 1) == 2);
    moe_team_report(&t, 2, true, 2);
    CHECK(moe_team_size(&t, 3) == 1);

    /* fixed_threads, and a single thread, never change. */
    moe_team_init(&t, 2, true);
    CHECK(!moe_team_watching(&t));
    moe_team_report(&t, 2, true, 0);
    CHECK(moe_team_size(&t, 1) == 2);
    moe_team_init(&t, 1, false);
    CHECK(!moe_team_watching(&t));
    CHECK(moe_team_size(&t, 0) == 1);

    /* What counts as a forward on shared cores: a run-queue wait of 0.1 ms and 1/8 of it. */
    CHECK(!moe_team_shared(0, 1 * MS));
    CHECK(!moe_team_shared(MS / 10 - 1, MS / 2) && moe_team_shared(MS / 10, MS / 2));
    CHECK(moe_team_shared(MS / 8, 1 * MS) && !moe_team_shared(MS / 8 - 1, 1 * MS));
    CHECK(moe_team_shared(5 * MS, 40 * MS) && !moe_team_shared(5 * MS, 40 * MS + 8));
}

/* Spins for about 60 ms of this thread's own CPU time; with arg, then stores there the
 * thread's whole run-queue wait so far (since it was created). */
static void *spin(void *arg)
{
    struct timespec ts;
    volatile double x = 1;
    do {
        for (int i = 0; i < 100000; i++)
            x = x * 1.0000001 + 1e-9;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    } while (ts.tv_sec == 0 && ts.tv_nsec < 60000000L);
    if (arg) *(long long *)arg = moe_team_waited_ns();
    return NULL;
}

/* Two threads spinning on one CPU wait on its run queue while the other runs: together their
 * waits (the kernel's schedstat) must grow by a good part of one's 60 ms, whichever the
 * scheduler ran first (one of them alone may wait for nothing, when it ran first to the end).
 * Skipped where the kernel keeps no schedstat (the watch is then off, layer_team.h). */
static void check_waited(void)
{
    if (access("/proc/thread-self/schedstat", R_OK) != 0) {
        printf("skip: no /proc/thread-self/schedstat, the run-queue wait reads as 0\n");
        CHECK(moe_team_waited_ns() == 0);
        return;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    REQUIRE(sched_getaffinity(0, sizeof one, &one) == 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &one))
        cpu++;
    cpu_set_t saved = one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0); /* the new thread inherits it */
    const long long before = moe_team_waited_ns();
    long long other = 0;
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, spin, &other) == 0);
    spin(NULL);
    const long long after = moe_team_waited_ns();
    REQUIRE(pthread_join(th, NULL) == 0);
    REQUIRE(sched_setaffinity(0, sizeof saved, &saved) == 0);
    CHECKF(after - before + other >= 10 * MS, "waited %lld + %lld ns sharing one CPU",
           after - before, other);
}

/* A layer that watches its threads gives the bits of one that does not, on one thread. */
static void check_layer(const moe_model *m, int index)
{
    moe_layer_options o1 = fx_options(1, MOE_RECIPE_F32);
    moe_layer_options o2 = fx_options(2, MOE_RECIPE_F32);
    o2.fixed_threads = false;
    moe_layer *l1 = fx_layer(m, index, &o1, NULL), *l2 = fx_layer(m, index, &o2, NULL);
    CHECK(strstr(moe_layer_explain(l2), "while preempted: fewer threads") != NULL);
    CHECK(strstr(moe_layer_explain(l1), "while preempted") == NULL); /* one thread */
    fwd_io a, b;
    io_make(&a, l1, 37);
    io_make(&b, l2, 37);
    for (int rep = 0; rep < 20; rep++) {
        moe_forward_args fa = args_of(&a), fb = args_of(&b);
        REQUIRE(moe_layer_forward(l1, &fa) == MOE_OK);
        REQUIRE(moe_layer_forward(l2, &fb) == MOE_OK);
        CHECKF(!memcmp(a.out, b.out, a.n * a.h * 4), "layer %d forward %d", index, rep);
    }
    /* An older caller's options, without fixed_threads: the default (watching). */
    moe_layer_options old = o2;
    old.size = offsetof(moe_layer_options, fixed_threads);
    moe_layer *l3 = fx_layer(m, index, &old, NULL);
    CHECK(strstr(moe_layer_explain(l3), "while preempted: fewer threads") != NULL);
    moe_layer_options fixed = o2;
    fixed.fixed_threads = true;
    moe_layer *l4 = fx_layer(m, index, &fixed, NULL);
    CHECK(strstr(moe_layer_explain(l4), "while preempted: every forward") != NULL);
    moe_layer_destroy(l4);
    moe_layer_destroy(l3);
    io_free(&a);
    io_free(&b);
    moe_layer_destroy(l1);
    moe_layer_destroy(l2);
}

int main(void)
{
    check_policy();
    check_waited();
    char dir[] = "/tmp/moe_test_layer_team_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    const fam_case *fc = &fam_cases[2]; /* DeepSeek-V3 FP8: a dense and an MoE layer */
    fx_write_model(dir, fc->config, 77);
    moe_model *m = fx_open(dir, false);
    check_layer(m, fc->moe_layer);
    check_layer(m, fc->other_layer);
    moe_model_close(m);
    fx_remove_model(dir);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
