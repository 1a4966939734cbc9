/* Running a compiler on generated source in a private temporary folder, shared by the CPU runner (runtime/cpu.c)
 * and the CUDA emulator (runtime/emu.c): make the folder, write files into it, run the compiler there with its
 * output captured, remove the folder. Safe to use from several threads at once (the measurement harness builds
 * in parallel). */
#ifndef KG_COMPILER_H
#define KG_COMPILER_H
#include <stddef.h>

/* kg_compiler_run_command's result when argv[0] could not be executed (errno says why). */
#define KG_COMPILER_NO_EXEC (-2)
/* kg_compiler_run_command's result when a signal ended the compiler. */
#define KG_COMPILER_SIGNALED 128
/* kg_compiler_run_command's result when the compiler ran past its time limit and was stopped. */
#define KG_COMPILER_TIMEOUT (-3)
/* The compiler's time limit in seconds: $KGEN_COMPILE_TIMEOUT (0: none), default 600. A generated kernel builds in
 * seconds; a program of thousands of stages can keep gcc busy for an hour, and nothing else would stop it. */
double kg_compiler_time_limit(void);
/* Appends "kgen: WHO 'CMD' ran past its time limit of N s (KGEN_COMPILE_TIMEOUT) and was stopped" to *log. */
void kg_compiler_log_timeout(char **log, const char *who, const char *cmd);
/* The compiler's output keeps at most this much (the rest is read and dropped): an error for every line of a
 * huge kernel is no reason to exhaust memory. */
#define KG_COMPILER_MAX_LOG ((size_t)4 << 20)

/* "dir/file" (heap), or NULL when out of memory. */
char *kg_compiler_join_path(const char *dir, const char *file);
/* Creates a private folder "$TMPDIR/<prefix><pid>-XXXXXX" ($TMPDIR defaults to /tmp; pid: this process, so that a
 * later kgen can tell a folder whose owner died) and returns its path (heap). On failure returns NULL and replaces
 * *log (freed) with the reason. Until kg_compiler_remove_dir, the folder is known to the signal cleanup below. */
char *kg_compiler_make_dir(const char *prefix, char **log);
/* Removes the build folders of kgen processes that are gone: "$TMPDIR/kgen-<pid>-*" and "kgen-emu-<pid>-*" of
 * this user whose pid is not alive (a live pid, even one reused, keeps its folders). Returns how many. */
int kg_compiler_clean_stale(void);
/* Installs handlers for SIGINT, SIGTERM and SIGHUP (where their disposition is the default) that kill running
 * compilers, remove every live build folder, then die of the signal as before. Idempotent. */
void kg_compiler_cleanup_on_signals(void);
/* Writes text to dir/file. Returns 0, or -1 with errno set. */
int kg_compiler_write_file(const char *dir, const char *file, const char *text);
/* Splits a command line from the environment ("ccache gcc -m64") in place into at most max words, no shell
 * involved. Returns the number of words. */
int kg_compiler_split_words(char *s, char **words, int max);
/* Runs argv (argv[0] looked up in PATH) in dir with stdout and stderr captured into *out (heap; NULL when it
 * printed nothing). Returns the exit status, KG_COMPILER_SIGNALED when a signal ended it, KG_COMPILER_TIMEOUT when
 * it ran past kg_compiler_time_limit (its whole group is killed), KG_COMPILER_NO_EXEC when argv[0] could not be
 * executed, or -1 when it could not be started (pipe, fork); errno is set for the last two.
 * The compiler runs in a process group of its own, which the signal cleanup kills. */
int kg_compiler_run_command(char *const argv[], const char *dir, char **out);
/* Removes files[0..nfiles) from *dir, then the folder itself; frees *dir and sets it to NULL. No-op on NULL. */
void kg_compiler_remove_dir(char **dir, const char *const *files, size_t nfiles);
#endif
