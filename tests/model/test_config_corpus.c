/* test_config_corpus.c — each malformed config.json fails with its own status and message. */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "model/model.h"

static const struct {
    const char *name;
    moe_status status;
} status_names[] = {
    {"MOE_EINVAL", MOE_EINVAL},
    {"MOE_ENOMEM", MOE_ENOMEM},
    {"MOE_EIO", MOE_EIO},
    {"MOE_EUNSUPPORTED", MOE_EUNSUPPORTED},
    {"MOE_EOVERFLOW", MOE_EOVERFLOW},
    {"MOE_EMISSING", MOE_EMISSING},
    {"MOE_EJSON", MOE_EJSON},
    {"MOE_EDUPLICATE", MOE_EDUPLICATE},
    {"MOE_ECONFIG", MOE_ECONFIG},
};

static bool status_from_name(const char *name, moe_status *out)
{
    for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; i++) {
        if (!strcmp(status_names[i].name, name)) {
            *out = status_names[i].status;
            return true;
        }
    }
    return false;
}

/* Splits LINE (no newline) at tabs into exactly three fields. */
static bool split3(char *line, char **a, char **b, char **c)
{
    *a = line;
    *b = strchr(line, '\t');
    if (!*b) return false;
    *(*b)++ = '\0';
    *c = strchr(*b, '\t');
    if (!*c) return false;
    *(*c)++ = '\0';
    return strchr(*c, '\t') == NULL;
}

static void run_case(const char *dir, const char *file, moe_status want, const char *needle)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    moe_model_desc d;
    memset(&d, 0x3c, sizeof d);
    moe_model_desc before = d;
    moe_status st = moe_model_desc_load(path, &d);
    CHECKF(st == want, "%s: got %d (%s), want %d", file, (int)st, moe_last_error(), (int)want);
    CHECKF(strstr(moe_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", file,
           moe_last_error(), needle);
    /* Messages name the file they are about. */
    CHECKF(strstr(moe_last_error(), path) != NULL, "%s: message '%s' does not name the file", file,
           moe_last_error());
    CHECKF(memcmp(&d, &before, sizeof d) == 0, "%s: output written on error", file);
    if (st == MOE_OK) moe_model_desc_free(&d);
}

int main(void)
{
    const char *dir = getenv("MOE_TEST_DATA");
    if (!dir) dir = "tests/data";
    char manifest[1024];
    snprintf(manifest, sizeof manifest, "%s/corpus/config_manifest.tsv", dir);
    FILE *f = fopen(manifest, "r");
    REQUIRE(f != NULL);
    char line[2048];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        char *file, *status, *needle;
        moe_status want = MOE_OK;
        bool ok = split3(line, &file, &status, &needle);
        CHECKF(ok, "bad manifest line '%s'", line);
        if (!ok) continue;
        ok = status_from_name(status, &want);
        CHECKF(ok, "unknown status '%s'", status);
        if (!ok) continue;
        run_case(dir, file, want, needle);
        cases++;
    }
    fclose(f);
    CHECKF(cases >= 12, "only %d corpus cases", cases);
    return TEST_END();
}
