#include "pch.h"
#include "../codegen/codegen.h"
#include "compiler.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PCH_NONE, PCH_BUILDING, PCH_READY, PCH_FAILED };
/* The builds with one command line before its PCH is made (see pch.h), and the command lines a process keeps one
 * for (tests change $KGEN_CFLAGS; a tuning has one). */
enum { PCH_AFTER = 2, PCH_MAX = 8 };

typedef struct {
  char *key; /* the command line, words joined by newlines */
  int builds, state;
  char *dir; /* the PCH's folder, once made (removed at exit) */
} pch_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pch_entry table[PCH_MAX];
static int nentries;
static pid_t owner; /* the process whose folders these are: a forked child must not remove them at its exit */
static const char *const files[] = {"kg_pch.h", "kg_pch.h.gch"};

static int disabled(void) {
  const char *e = getenv("KGEN_NO_PCH");
  return e && *e && strcmp(e, "0") != 0;
}

static char *join(char *const *argv, int argc) {
  size_t n = 1;
  for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 1;
  char *s = malloc(n), *p = s;
  if (!s) return NULL;
  for (int i = 0; i < argc; i++) {
    size_t k = strlen(argv[i]);
    memcpy(p, argv[i], k);
    p += k;
    *p++ = '\n';
  }
  *p = 0;
  return s;
}

void kg_pch_release(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nentries; i++) {
    if (table[i].dir && getpid() == owner) kg_compiler_remove_dir(&table[i].dir, files, 2);
    free(table[i].dir);
    free(table[i].key);
    table[i] = (pch_entry){0};
  }
  nentries = 0;
  pthread_mutex_unlock(&lock);
}

static void at_exit_once(void) {
  owner = getpid();
  atexit(kg_pch_release);
}

/* Under the lock: the entry of key, added when new (NULL when the table is full or memory ran out). */
static pch_entry *entry_of(const char *key) {
  for (int i = 0; i < nentries; i++)
    if (!strcmp(table[i].key, key)) return &table[i];
  if (nentries == PCH_MAX) return NULL;
  char *k = strdup(key);
  if (!k) return NULL;
  table[nentries] = (pch_entry){.key = k};
  return &table[nentries++];
}

static int is_gcc_pch(const char *dir) {
  char *path = kg_compiler_join_path(dir, files[1]);
  FILE *f = path ? fopen(path, "rb") : NULL;
  free(path);
  char magic[4] = {0};
  int ok = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "gpch", 4);
  if (f) fclose(f);
  return ok;
}

/* Makes the PCH of the command line argv in a new folder; its path, or NULL (nothing left behind). */
static char *make(char *const *argv, int argc) {
  char *log = NULL, *dir = kg_compiler_make_dir("kgen-", &log);
  free(log);
  log = NULL;
  if (!dir) return NULL;
  char **cmd = malloc(sizeof(char *) * (size_t)(argc + 6));
  int ok = cmd && kg_compiler_write_file(dir, files[0], kg_codegen_c_includes()) == 0;
  if (ok) {
    memcpy(cmd, argv, sizeof(char *) * (size_t)argc);
    cmd[argc] = "-x";
    cmd[argc + 1] = "c-header";
    cmd[argc + 2] = (char *)files[0];
    cmd[argc + 3] = "-o";
    cmd[argc + 4] = (char *)files[1];
    cmd[argc + 5] = NULL;
    ok = kg_compiler_run_command(cmd, dir, &log) == 0 && is_gcc_pch(dir);
  }
  free(cmd);
  free(log);
  if (!ok) kg_compiler_remove_dir(&dir, files, 2);
  return dir;
}

char *kg_pch_for(char *const *argv, int argc) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (disabled() || argc <= 0) return NULL;
  pthread_once(&once, at_exit_once);
  char *key = join(argv, argc), *path = NULL;
  if (!key) return NULL;
  pthread_mutex_lock(&lock);
  pch_entry *e = entry_of(key);
  int build = 0;
  if (e) {
    e->builds++;
    if (e->state == PCH_READY) path = kg_compiler_join_path(e->dir, files[0]);
    else if (e->state == PCH_NONE && e->builds > PCH_AFTER) {
      e->state = PCH_BUILDING;
      build = 1;
    }
  }
  pthread_mutex_unlock(&lock);
  if (build) {
    char *dir = make(argv, argc);
    pthread_mutex_lock(&lock);
    e = entry_of(key); /* the same entry: entries are never removed before exit */
    e->dir = dir;
    e->state = dir ? PCH_READY : PCH_FAILED;
    if (dir) path = kg_compiler_join_path(dir, files[0]);
    pthread_mutex_unlock(&lock);
  }
  free(key);
  return path;
}

void kg_pch_failed(char *const *argv, int argc) {
  char *key = join(argv, argc);
  if (!key) return;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nentries; i++)
    if (!strcmp(table[i].key, key)) table[i].state = PCH_FAILED;
  pthread_mutex_unlock(&lock);
  free(key);
}
