/* commands.h — the moe subcommands: one file each, each with its own --help. */
#ifndef MOE_TOOLS_COMMANDS_H
#define MOE_TOOLS_COMMANDS_H

/* Each takes the arguments after the subcommand name (argv[0] is the subcommand) and returns
 * the process exit status: 0 on success, 1 on a failure reported with one line on stderr,
 * 2 on a usage error. */
int moe_cmd_caps(int argc, char **argv);
int moe_cmd_inspect(int argc, char **argv);
int moe_cmd_gen(int argc, char **argv);
int moe_cmd_route(int argc, char **argv);
int moe_cmd_run(int argc, char **argv);
int moe_cmd_bench(int argc, char **argv);
/* `moe bench --ep` (cmd_bench_ep.c): moe_cmd_bench hands it every call with --ep. */
int moe_cmd_bench_ep(int argc, char **argv);

#endif
