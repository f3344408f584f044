/* bench_report.c — `moe bench` output: floors, per-layer lines, the table, JSON and the roofline
 * SVG. */
#include "bench_report.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "cli_util.h"
#include "cpu/cpu.h"
#include "trace_report.h"

/* "avx512bf16 (MOE_ISA unset)" or "avx2 (MOE_ISA=avx2)": the level the kernels were chosen
 * under. */
static void isa_text(const moe_cpu_info *c, char *buf, size_t size)
{
    const char *level = moe_isa_level_name(cli_isa_level(&c->allowed));
    if (c->cap_from_env)
        snprintf(buf, size, "%s (MOE_ISA=%s)", level, moe_isa_level_name(c->cap));
    else
        snprintf(buf, size, "%s (MOE_ISA unset)", level);
}

void bench_report_floors(FILE *out, const bench_floors *f)
{
    char isa[64], features[128], l2[32] = "L2 size unknown";
    isa_text(&f->cpu, isa, sizeof isa);
    moe_cpu_mask_format(moe_cpu_caps_mask(&f->cpu.allowed), features, sizeof features);
    if (f->l2_bytes)
        snprintf(l2, sizeof l2, "L2 %.1f MiB per core", (double)f->l2_bytes / (1 << 20));
    fprintf(out, "machine: %s; %d cores, %s, last-level cache %.0f MiB\n",
            f->cpu.brand[0] ? f->cpu.brand : "(no CPU brand string)", f->cores, l2,
            f->llc_bytes / (1 << 20));
    fprintf(out, "ISA level %s, features used: %s; libmoe %s\n\n", isa, features,
            moe_version_string());
    fprintf(out, "machine floors (this run; the fastest of a few passes):\n");
    fprintf(out, "  read bandwidth        1 thread %7.2f GB/s   ", f->read_gbs[0]);
    if (f->threads > 1) fprintf(out, "  %d threads %7.2f GB/s", f->threads, f->read_gbs[1]);
    fputc('\n', out);
    for (int i = 0; i < f->n_insns; i++) {
        fprintf(out, "  %-20s  1 thread %7.1f GFLOP/s", f->insn[i], f->peak_gflops[i][0]);
        if (f->threads > 1)
            fprintf(out, "  %d threads %7.1f GFLOP/s", f->threads, f->peak_gflops[i][1]);
        fputc('\n', out);
    }
}

void bench_report_layer(FILE *out, const bench_layer_info *l, const bench_floors *f)
{
    fprintf(out,
            "\n%s %s: hidden %lld, expert intermediate %lld, top-%lld, %lld of %lld experts "
            "resident%s; %d thread%s\n",
            l->preset, l->format, (long long)l->hidden, (long long)l->inter, (long long)l->topk,
            (long long)l->resident, (long long)l->experts,
            l->resident < l->experts
                ? " (routed over all; the forward's i-th expert runs on copy i mod resident)"
                : "",
            l->threads, l->threads == 1 ? "" : "s");
    fprintf(out, "  experts: %s, recipe %s; compute floor: %s\n", l->kernel, l->recipe,
            l->insn[0] ? l->insn : "none (scalar reference kernels)");
    if (l->shared_insn[0])
        fprintf(out, "  shared experts: %s; compute floor: %s\n", l->shared_kernel, l->shared_insn);
    fputs("  created: ", out);
    create_stats_print(out, &l->create);
    fputc('\n', out);
    if (l->resident < l->experts && l->create.packed_bytes < 2 * f->llc_bytes)
        fprintf(out,
                "  note: the resident copies (%.0f MB) are within twice the last-level cache "
                "(%.0f MB), so a copy's next use may find it cached: raise --memory-gb\n",
                l->create.packed_bytes / 1e6, f->llc_bytes / 1e6);
    fprintf(out,
            "  read ceiling at %d thread%s: %.2f GB/s (the fastest pass so far, eviction "
            "reads before each forward included)\n",
            l->threads, l->threads == 1 ? "" : "s", f->read_gbs[bench_floors_slot(f, l->threads)]);
}

/* Token rows per routed expert hit: the mean batch of the expert kernels. */
static double tokens_per_hit(const bench_result *r)
{
    return r->hit > 0 ? (double)r->tokens * (double)r->layer->topk / r->hit : 0.0;
}

void bench_report_header(FILE *out)
{
    fprintf(out, "  %6s %10s %9s %5s %7s %10s %8s %9s %10s %6s %5s\n", "tokens", "ms", "tok/s",
            "hit", "tok/hit", "weights MB", "GB/s", "GFLOP/s", "floor ms", "effic", "bound");
}

void bench_report_row(FILE *out, const bench_result *r)
{
    const double s = r->ms / 1e3;
    fprintf(out, "  %6zu %10.3f %9.1f %5.1f %7.1f %10.1f %8.2f %9.1f %10.3f %6.2f %5s\n", r->tokens,
            r->ms, (double)r->tokens / s, r->hit, tokens_per_hit(r), r->weight_bytes / 1e6,
            r->weight_bytes / s / 1e9, r->flops / s / 1e9, r->floor_ms, r->efficiency,
            r->compute_bound ? "flops" : "mem");
}

void bench_report_trace(FILE *out, const bench_result *r)
{
    if (!r->trace) return;
    fprintf(out, "\ntrace: %zu token%s, %d thread%s (the median of %d forwards)\n", r->tokens,
            r->tokens == 1 ? "" : "s", r->layer->threads, r->layer->threads == 1 ? "" : "s",
            r->repeats);
    trace_report(out, r->trace);
    fprintf(out, "  %-20s %-52s %14s %14s %12.0f\n", "forward (wall)", "", "", "", r->trace_ns);
}

/* The trace's steps: name, kernel, bytes read and written, ns. */
static json_t *trace_json(const moe_trace *tr)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < tr->count && i < MOE_TRACE_MAX_STEPS; i++) {
        const moe_trace_step *s = &tr->steps[i];
        json_t *o = json_object();
        json_object_set_new(o, "step", json_string(s->name));
        json_object_set_new(o, "kernel", json_string(s->kernel));
        json_object_set_new(o, "bytes_read", json_integer((json_int_t)s->bytes_read));
        json_object_set_new(o, "bytes_written", json_integer((json_int_t)s->bytes_written));
        json_object_set_new(o, "ns", json_integer((json_int_t)s->ns));
        json_array_append_new(a, o);
    }
    return a;
}

/* What the figures belong to: the CPU, its cores and L2, the ISA level and features the
 * kernels were chosen under, the library's version. */
static json_t *machine_json(const bench_floors *f)
{
    json_t *o = json_object(), *features = json_array();
    const uint32_t mask = moe_cpu_caps_mask(&f->cpu.allowed);
    for (uint32_t bit = 1; bit & MOE_FEAT_ALL_; bit <<= 1)
        if (mask & bit) json_array_append_new(features, json_string(moe_cpu_feature_name(bit)));
    json_object_set_new(o, "cpu", json_string(f->cpu.brand));
    json_object_set_new(o, "cores", json_integer(f->cores));
    json_object_set_new(o, "l2_bytes",
                        f->l2_bytes ? json_integer((json_int_t)f->l2_bytes) : json_null());
    json_object_set_new(o, "isa_level",
                        json_string(moe_isa_level_name(cli_isa_level(&f->cpu.allowed))));
    json_object_set_new(o, "features", features);
    json_object_set_new(o, "moe_isa",
                        f->cpu.cap_from_env ? json_string(moe_isa_level_name(f->cpu.cap))
                                            : json_null());
    json_object_set_new(o, "libmoe_version", json_string(moe_version_string()));
    return o;
}

static json_t *floors_json(const bench_floors *f)
{
    json_t *o = json_object(), *peaks = json_object();
    json_object_set_new(o, "threads", json_integer(f->threads));
    json_object_set_new(o, "read_gbps_1_thread", json_real(f->read_gbs[0]));
    json_object_set_new(o, "read_gbps_all_threads", json_real(f->read_gbs[1]));
    json_object_set_new(o, "llc_bytes", json_integer((json_int_t)f->llc_bytes));
    for (int i = 0; i < f->n_insns; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "gflops_1_thread", json_real(f->peak_gflops[i][0]));
        json_object_set_new(p, "gflops_all_threads", json_real(f->peak_gflops[i][1]));
        json_object_set_new(peaks, f->insn[i], p);
    }
    json_object_set_new(o, "peaks", peaks);
    return o;
}

static json_t *result_json(const bench_result *r)
{
    const bench_layer_info *l = r->layer;
    const double s = r->ms / 1e3;
    json_t *o = json_object();
    json_object_set_new(o, "preset", json_string(l->preset));
    json_object_set_new(o, "format", json_string(l->format));
    json_object_set_new(o, "recipe", json_string(l->recipe));
    json_object_set_new(o, "kernel", json_string(l->kernel));
    json_object_set_new(o, "insn", json_string(l->insn));
    json_object_set_new(o, "shared_kernel",
                        l->shared_insn[0] ? json_string(l->shared_kernel) : json_null());
    json_object_set_new(o, "shared_insn",
                        l->shared_insn[0] ? json_string(l->shared_insn) : json_null());
    json_object_set_new(o, "resident_experts", json_integer(l->resident));
    json_object_set_new(o, "tokens", json_integer((json_int_t)r->tokens));
    json_object_set_new(o, "threads", json_integer(l->threads));
    json_object_set_new(o, "ms_per_forward", json_real(r->ms));
    json_object_set_new(o, "experts_hit", json_real(r->hit));
    json_object_set_new(o, "tokens_per_expert_hit", json_real(tokens_per_hit(r)));
    json_object_set_new(o, "weight_bytes_read", json_integer((json_int_t)r->weight_bytes));
    json_object_set_new(o, "flops", json_integer((json_int_t)r->flops));
    json_object_set_new(o, "flops_shared", json_integer((json_int_t)r->shared_flops));
    json_object_set_new(o, "bandwidth_gbps", json_real(r->weight_bytes / s / 1e9));
    json_object_set_new(o, "gflops", json_real(r->flops / s / 1e9));
    json_object_set_new(o, "floor_ms", json_real(r->floor_ms));
    json_object_set_new(o, "efficiency", json_real(r->efficiency));
    json_object_set_new(o, "bound", json_string(r->compute_bound ? "compute" : "memory"));
    const create_stats *c = &l->create;
    json_object_set_new(o, "create_ms", json_real(c->ms));
    json_object_set_new(o, "create_user_ms", json_real(c->user_ms));
    json_object_set_new(o, "create_sys_ms", json_real(c->sys_ms));
    json_object_set_new(o, "packed_bytes", json_integer((json_int_t)c->packed_bytes));
    json_object_set_new(o, "pack_gbps", json_real(c->pack_gbs));
    json_object_set_new(o, "pack_gbps_per_thread_cpu", json_real(c->pack_gbs_cpu));
    json_object_set_new(o, "create_peak_rss_growth_bytes", json_integer((json_int_t)c->rss_growth));
    if (r->trace) {
        json_object_set_new(o, "trace", trace_json(r->trace));
        json_object_set_new(o, "trace_forward_ns", json_real(r->trace_ns));
    }
    return o;
}

bool bench_report_json(FILE *out, const bench_floors *f, const bench_result *r, size_t n)
{
    json_t *doc = json_object(), *cases = json_array();
    if (!doc || !cases) {
        json_decref(doc);
        json_decref(cases);
        return false;
    }
    json_object_set_new(doc, "machine", machine_json(f));
    json_object_set_new(doc, "floors", floors_json(f));
    for (size_t i = 0; i < n; i++)
        json_array_append_new(cases, result_json(&r[i]));
    json_object_set_new(doc, "cases", cases);
    const int rc = json_dumpf(doc, out, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(doc);
    return rc == 0 && fputc('\n', out) != EOF;
}

/* ---- The roofline ----------------------------------------------------------------------
 * x: arithmetic intensity (flops per weight byte read), y: GFLOP/s, both log10. Only the
 * ceilings the cases ran against are drawn: each layer's instruction (and its shared experts'
 * when they run another) at each thread count measured, or the read line alone for kernels
 * with no instruction's peak. */

#define SVG_W 1000.0
#define SVG_H 580.0
#define PLOT_X0 80.0
#define PLOT_X1 700.0
#define PLOT_Y0 64.0
#define PLOT_Y1 520.0
#define LABEL_GAP 13.0 /* px between ceiling labels: 11 px text, 2 px apart */
#define MAX_CEILINGS (2 * (BENCH_MAX_INSNS + 1))

typedef struct axes {
    double lx0, lx1, ly0, ly1; /* log10 ranges */
} axes;

static double px(const axes *a, double x)
{
    return PLOT_X0 + (log10(x) - a->lx0) / (a->lx1 - a->lx0) * (PLOT_X1 - PLOT_X0);
}

static double py(const axes *a, double y)
{
    return PLOT_Y1 - (log10(y) - a->ly0) / (a->ly1 - a->ly0) * (PLOT_Y1 - PLOT_Y0);
}

static const char *colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

/* TEXT with XML's special characters escaped. */
static void svg_text(FILE *o, const char *text)
{
    for (const char *c = text; *c; c++)
        switch (*c) {
        case '&': fputs("&amp;", o); break;
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '\'': fputs("&apos;", o); break;
        case '"': fputs("&quot;", o); break;
        default: fputc(*c, o);
        }
}

/* A ceiling: an instruction (index into f->insn; -1: the read line alone) at a thread slot. */
typedef struct ceiling {
    int insn, slot;
    double read, peak; /* GB/s and GFLOP/s (peak 0: none) */
    double label_y;
    const char *colour; /* one per instruction; grey for the read line alone */
} ceiling;

static void add_ceiling(const bench_floors *f, ceiling *c, int *n, int insn, int slot)
{
    for (int i = 0; i < *n; i++)
        if (c[i].insn == insn && c[i].slot == slot) return;
    if (*n == MAX_CEILINGS) return;
    const char *colour = insn < 0 ? "#555" : NULL;
    int insns = 0; /* the instructions drawn so far, each counted at its first ceiling */
    for (int i = 0; i < *n; i++) {
        if (c[i].insn == insn) colour = c[i].colour;
        bool first = c[i].insn >= 0;
        for (int j = 0; j < i; j++)
            first = first && c[j].insn != c[i].insn;
        insns += first;
    }
    const double peak = insn >= 0 ? f->peak_gflops[insn][slot] : 0;
    c[*n] = (ceiling){insn, slot, f->read_gbs[slot], peak, 0, colour ? colour : colours[insns % 6]};
    ++*n;
}

/* The ceilings the cases were held to, in order of first use. */
static int ceilings_of(const bench_floors *f, const bench_result *r, size_t n, ceiling *c)
{
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_layer_info *l = r[i].layer;
        const int slot = bench_floors_slot(f, l->threads);
        add_ceiling(f, c, &count, l->insn[0] ? bench_floors_insn(f, l->insn) : -1, slot);
        if (l->shared_insn[0])
            add_ceiling(f, c, &count, bench_floors_insn(f, l->shared_insn), slot);
    }
    return count;
}

/* The ceiling's value at X: min(read · x, peak), or read · x without a peak. */
static double ceiling_at(const ceiling *c, double x)
{
    return c->peak > 0 && c->peak < c->read * x ? c->peak : c->read * x;
}

static int cmp_label(const void *a, const void *b)
{
    const double x = (*(const ceiling *const *)a)->label_y,
                 y = (*(const ceiling *const *)b)->label_y;
    return (x > y) - (x < y);
}

/* Each label at its ceiling's right end, then moved down just enough to stand LABEL_GAP below
 * the one above, and the whole column moved up if it runs off the bottom. */
static void place_labels(const axes *a, ceiling *c, int n)
{
    ceiling *order[MAX_CEILINGS];
    for (int i = 0; i < n; i++) {
        c[i].label_y = py(a, ceiling_at(&c[i], pow(10, a->lx1))) + 4;
        order[i] = &c[i];
    }
    qsort(order, (size_t)n, sizeof order[0], cmp_label);
    for (int i = 1; i < n; i++)
        if (order[i]->label_y < order[i - 1]->label_y + LABEL_GAP)
            order[i]->label_y = order[i - 1]->label_y + LABEL_GAP;
    const double over = n ? order[n - 1]->label_y - (SVG_H - 40) : 0;
    for (int i = 0; over > 0 && i < n; i++)
        order[i]->label_y -= over;
}

static void draw_ceiling(FILE *o, const axes *a, const bench_floors *f, const ceiling *c)
{
    const double x0 = pow(10, a->lx0), x1 = pow(10, a->lx1);
    const char *colour = c->colour;
    fprintf(o, "<polyline class='ceiling' fill='none' stroke='%s' stroke-width='1.5'%s points='",
            colour, c->slot ? "" : " stroke-dasharray='5,4'");
    fprintf(o, "%.1f,%.1f ", px(a, x0), py(a, ceiling_at(c, x0)));
    const double ridge = c->peak > 0 ? c->peak / c->read : x1;
    if (ridge > x0 && ridge < x1) fprintf(o, "%.1f,%.1f ", px(a, ridge), py(a, c->peak));
    const double yend = py(a, ceiling_at(c, x1));
    fprintf(o, "%.1f,%.1f'/>\n", px(a, x1), yend);
    if (fabs(c->label_y - 4 - yend) > 1) /* a moved label: a leader to its ceiling's end */
        fprintf(o,
                "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='0.5'/>\n",
                PLOT_X1, yend, PLOT_X1 + 8, c->label_y - 4, colour);
    const int threads = c->slot ? f->threads : 1;
    fprintf(o, "<text class='ceiling-label' x='%.1f' y='%.1f' font-size='11' fill='%s'>%s, %d thr",
            PLOT_X1 + 10, c->label_y, colour, c->insn >= 0 ? f->insn[c->insn] : "read only",
            threads);
    fprintf(o, " (%.0f GB/s", c->read);
    if (c->peak > 0) fprintf(o, ", %.0f GFLOP/s", c->peak);
    fprintf(o, ")</text>\n");
}

/* "deepseek-v3 fp8 (recipe q8), ...": each distinct layer once, at most four. */
static void print_title(FILE *o, const bench_floors *f, const bench_result *r, size_t n)
{
    fprintf(o, "<text class='title' x='%.0f' y='22' font-size='15'>moe bench roofline: ", PLOT_X0);
    int shown = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_layer_info *l = r[i].layer;
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen = seen || (!strcmp(r[j].layer->preset, l->preset) &&
                            !strcmp(r[j].layer->format, l->format) &&
                            !strcmp(r[j].layer->recipe, l->recipe));
        if (seen) continue;
        if (shown == 4) {
            fputs(", ...", o);
            break;
        }
        fputs(shown++ ? ", " : "", o);
        svg_text(o, l->preset);
        fputc(' ', o);
        svg_text(o, l->format);
        fprintf(o, " (recipe ");
        svg_text(o, l->recipe);
        fputc(')', o);
    }
    fprintf(o, "</text>\n<text class='subtitle' x='%.0f' y='42' font-size='12'>", PLOT_X0);
    svg_text(o, f->cpu.brand[0] ? f->cpu.brand : "(no CPU brand string)");
    fprintf(o, "; %d cores; GFLOP/s against flops per weight byte</text>\n", f->cores);
}

bool bench_report_svg(const char *path, const bench_floors *f, const bench_result *r, size_t n)
{
    FILE *o = fopen(path, "w");
    if (!o) return false;
    ceiling c[MAX_CEILINGS];
    const int nc = ceilings_of(f, r, n, c);
    double ymax = 1, ymin = 1e9;
    for (int i = 0; i < nc; i++) {
        const double top = ceiling_at(&c[i], 1e4);
        if (top > ymax) ymax = top;
        if (c[i].read * 0.1 < ymin) ymin = c[i].read * 0.1; /* the read line at x = 0.1 */
    }
    for (size_t i = 0; i < n; i++) {
        const double g = r[i].flops / r[i].ms / 1e6;
        if (g > 0 && g < ymin) ymin = g;
        if (g > ymax) ymax = g;
    }
    const axes a = {-1, 4, floor(log10(ymin)), ceil(log10(ymax * 1.5))};
    place_labels(&a, c, nc);
    fprintf(o,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
            "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            SVG_W, SVG_H);
    print_title(o, f, r, n);
    for (int d = (int)a.lx0; d <= (int)a.lx1; d++) /* decades */
        fprintf(o,
                "<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' stroke='#ddd'/><text x='%.1f' "
                "y='%.0f' font-size='11' text-anchor='middle'>%g</text>\n",
                px(&a, pow(10, d)), PLOT_Y0, px(&a, pow(10, d)), PLOT_Y1, px(&a, pow(10, d)),
                PLOT_Y1 + 16, pow(10, d));
    for (int d = (int)a.ly0; d <= (int)a.ly1; d++)
        fprintf(o,
                "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#ddd'/><text x='%.0f' "
                "y='%.1f' font-size='11' text-anchor='end'>%g</text>\n",
                PLOT_X0, py(&a, pow(10, d)), PLOT_X1, py(&a, pow(10, d)), PLOT_X0 - 6,
                py(&a, pow(10, d)) + 4, pow(10, d));
    fprintf(o,
            "<text x='%.0f' y='%.0f' font-size='12' text-anchor='middle'>flops per weight "
            "byte (log)</text>\n<text x='18' y='%.0f' font-size='12' transform='rotate(-90 18 "
            "%.0f)' text-anchor='middle'>GFLOP/s (log)</text>\n",
            (PLOT_X0 + PLOT_X1) / 2, SVG_H - 22, (PLOT_Y0 + PLOT_Y1) / 2, (PLOT_Y0 + PLOT_Y1) / 2);
    for (int i = 0; i < nc; i++)
        draw_ceiling(o, &a, f, &c[i]);
    for (size_t i = 0; i < n; i++) {
        const double x = r[i].flops / r[i].weight_bytes, g = r[i].flops / r[i].ms / 1e6;
        if (!(x > 0) || !(g > 0)) continue;
        const bool all = r[i].layer->threads > 1;
        fprintf(o, "<circle cx='%.1f' cy='%.1f' r='4' fill='%s' fill-opacity='0.8'><title>",
                px(&a, x), py(&a, g), all ? "#000" : "#888");
        svg_text(o, r[i].layer->preset);
        fprintf(o,
                " %s T=%zu, %d thr: %.3f ms, efficiency %.2f</title></circle>\n<text x='%.1f' "
                "y='%.1f' font-size='9'>%zu</text>\n",
                r[i].layer->format, r[i].tokens, r[i].layer->threads, r[i].ms, r[i].efficiency,
                px(&a, x) + 5, py(&a, g) - 4, r[i].tokens);
    }
    fprintf(o,
            "<text x='%.0f' y='%.0f' font-size='11'>points: tokens per forward (grey 1 thread, "
            "black %d threads); dashed ceilings 1 thread</text>\n</svg>\n",
            PLOT_X0, SVG_H - 4, f->threads);
    return fclose(o) == 0;
}
