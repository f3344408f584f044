/* main.c — the moe command: dispatch to a subcommand, and the top-level help. */
#include <stdio.h>
#include <string.h>

#include "moe.h"
#include "commands.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"caps", moe_cmd_caps, "CPU features detected, kernels compiled, and what libmoe will use"},
    {"inspect", moe_cmd_inspect, "a checkpoint's config, per-layer plan, tensors and kernels"},
    {"gen", moe_cmd_gen, "write a synthetic checkpoint in a family's real layout"},
    {"route", moe_cmd_route, "route router logits (.npy) with a config's routing method"},
    {"run", moe_cmd_run, "run one layer's MoE block on hidden states (.npy)"},
    {"bench", moe_cmd_bench, "one MoE layer at real shapes against this machine's floors"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: moe COMMAND [ARGS]   (moe COMMAND --help for its options)\n\n"
            "libmoe %s: the Mixture-of-Experts block of DeepSeek, Kimi-K2, Qwen3-MoE,\n"
            "Mixtral and gpt-oss, straight from Hugging Face checkpoints.\n\ncommands:\n",
            moe_version_string());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("moe %s\n", moe_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "moe: unknown command '%s' (moe --help lists them)\n", argv[1]);
    return 2;
}
