/* config_fixture.h — model tests: loading a config.json fixture of tests/data/configs. */
#ifndef MOE_TEST_CONFIG_FIXTURE_H
#define MOE_TEST_CONFIG_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "test.h"
#include "model/model.h"

/* Parses FILE of $MOE_TEST_DATA/configs (tests/data/configs when unset) into D. */
static inline moe_status load_fixture(const char *file, moe_model_desc *d)
{
    const char *dir = getenv("MOE_TEST_DATA");
    char path[512];
    snprintf(path, sizeof path, "%s/configs/%s", dir ? dir : "tests/data", file);
    return moe_model_desc_load(path, d);
}

#endif
