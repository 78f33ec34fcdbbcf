/* floor: the raw floor each engine benchmark is measured against. The same
 * work done with nothing in between: posix_spawn, one pipe for stdout+stderr,
 * a pidfd, epoll. No store, no log file, no coroutines. Every mode prints one
 * JSON object on stdout.
 *
 *   floor spawn N K PROG [ARGS]  N runs of PROG, at most K in flight; each run's
 *                                output is read (and dropped) until EOF and its
 *                                exit reaped. K=1 also gives per-run latency.
 *   floor ingest PROG [ARGS]     one run of PROG; its output is read from the
 *                                pipe 64 KiB at a time and split into lines.
 *   floor hold N PROG [ARGS]     starts N runs of PROG (output to /dev/null, a
 *                                pidfd each), then reports the time to start
 *                                them and this process's memory and descriptors
 *                                per run; kills them after.
 *   floor wake N UNTIL [LOAD]    N runs of `UNTIL <deadline ns>` one at a time;
 *                                how long after it exits (the time it writes
 *                                last) the parent is woken by its exit (pidfd);
 *                                with LOAD, that many /bin/true children cycle
 *                                in the same loop meanwhile.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

static long rss_bytes(void) {
  long pages = 0, rss = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return rss * sysconf(_SC_PAGESIZE);
}

static int open_fds(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) ++n;
  closedir(d);
  return n - 3; /* ".", "..", and the directory's own descriptor */
}

static void die(const char* what) {
  fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void raise_nofile(void) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

struct run {
  pid_t pid;
  int out;   /* pipe read end, -1 once at EOF */
  int pidfd; /* -1 once reaped */
  int64_t start;
};

/* Starts argv in its own process group, as the engine does, with
 * stdout+stderr on a new pipe (or on /dev/null when !pipe_out); fills r. */
static void start_with(struct run* r, char** argv, int pipe_out) {
  int p[2] = {-1, -1};
  if (!pipe_out) {
    p[1] = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (p[1] < 0) die("open /dev/null");
  } else if (pipe2(p, O_CLOEXEC) != 0) {
    die("pipe2");
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, 0);
  r->start = now_ns();
  int rc = posix_spawn(&r->pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(p[1]);
  if (rc != 0) {
    errno = rc;
    die("posix_spawn");
  }
  r->out = p[0];
  if (r->out >= 0) fcntl(r->out, F_SETFL, O_NONBLOCK);
  r->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
  if (r->pidfd < 0) die("pidfd_open");
}

static void start(struct run* r, char** argv) { start_with(r, argv, 1); }

static char drop_buf[1 << 16];

/* Reads what is there; returns 1 at EOF. */
static int drain(int fd) {
  for (;;) {
    ssize_t n = read(fd, drop_buf, sizeof drop_buf);
    if (n > 0) continue;
    if (n == 0) return 1;
    if (errno == EINTR) continue;
    return 0;
  }
}

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? -1 : x > y;
}

static double pct(int64_t* v, int n, double p) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  int i = (int)(p * (n - 1) + 0.5);
  return (double)v[i] / 1e3; /* microseconds */
}

/* epoll data: index * 2 + (0 output, 1 exit) */
static int mode_spawn(int n, int k, char** argv) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct run* runs = calloc((size_t)k, sizeof *runs);
  int* free_slots = malloc(sizeof(int) * (size_t)k);
  int nfree = k;
  for (int i = 0; i < k; ++i) free_slots[i] = k - 1 - i;
  int64_t* lat = malloc(sizeof(int64_t) * (size_t)n);
  int started = 0, done = 0;
  double cpu0 = cpu_seconds();
  int64_t t0 = now_ns();
  while (done < n) {
    while (started < n && nfree > 0) {
      int s = free_slots[--nfree];
      start(&runs[s], argv);
      struct epoll_event e1 = {.events = EPOLLIN, .data.u64 = (uint64_t)s * 2};
      struct epoll_event e2 = {.events = EPOLLIN, .data.u64 = (uint64_t)s * 2 + 1};
      epoll_ctl(ep, EPOLL_CTL_ADD, runs[s].out, &e1);
      epoll_ctl(ep, EPOLL_CTL_ADD, runs[s].pidfd, &e2);
      ++started;
    }
    struct epoll_event evs[64];
    int m = epoll_wait(ep, evs, 64, -1);
    if (m < 0 && errno == EINTR) continue;
    if (m < 0) die("epoll_wait");
    for (int i = 0; i < m; ++i) {
      int s = (int)(evs[i].data.u64 / 2);
      struct run* r = &runs[s];
      if (evs[i].data.u64 % 2 == 0) {
        if (r->out >= 0 && drain(r->out)) {
          close(r->out);
          r->out = -1;
        }
      } else if (r->pidfd >= 0) {
        siginfo_t si;
        if (waitid((idtype_t)P_PIDFD, (id_t)r->pidfd, &si, WEXITED) != 0) die("waitid");
        close(r->pidfd);
        r->pidfd = -1;
      }
      if (r->out < 0 && r->pidfd < 0 && r->pid) {
        lat[done++] = now_ns() - r->start;
        r->pid = 0;
        free_slots[nfree++] = s;
      }
    }
  }
  double wall = (double)(now_ns() - t0) / 1e9;
  double cpu = cpu_seconds() - cpu0;
  printf(
      "{\"runs\":%d,\"in_flight\":%d,\"wall_s\":%.6f,\"per_s\":%.3f,\"cpu_us_per_run\":%.3f,"
      "\"p50_us\":%.3f,\"p99_us\":%.3f}\n",
      n, k, wall, n / wall, cpu / n * 1e6, pct(lat, n, 0.50), pct(lat, n, 0.99));
  return 0;
}

static int mode_ingest(char** argv) {
  struct run r;
  double cpu0 = cpu_seconds();
  int64_t t0 = now_ns();
  start(&r, argv);
  fcntl(r.out, F_SETFL, 0); /* blocking reads: nothing else to wait for */
  static char buf[1 << 16];
  uint64_t bytes = 0, lines = 0;
  for (;;) {
    ssize_t n = read(r.out, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes += (uint64_t)n;
    const char* p = buf;
    const char* end = buf + n;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
      ++lines;
      ++p;
    }
  }
  siginfo_t si;
  waitid((idtype_t)P_PIDFD, (id_t)r.pidfd, &si, WEXITED);
  double cpu = cpu_seconds() - cpu0;
  double wall = (double)(now_ns() - t0) / 1e9;
  printf("{\"bytes\":%llu,\"lines\":%llu,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"cpu_s_per_gib\":%.6f}\n",
         (unsigned long long)bytes, (unsigned long long)lines, wall, cpu, cpu / ((double)bytes / (1 << 30)));
  return 0;
}

static int mode_hold(int n, char** argv) {
  raise_nofile();
  struct run* runs = calloc((size_t)n, sizeof *runs);
  long rss0 = rss_bytes();
  int fds0 = open_fds();
  int64_t t0 = now_ns();
  /* Only the pidfd is held: two descriptors per run would not fit 10,000
   * runs under this machine's hard limit of 20,000 open files. */
  for (int i = 0; i < n; ++i) start_with(&runs[i], argv, 0);
  double wall = (double)(now_ns() - t0) / 1e9;
  long rss1 = rss_bytes();
  int fds1 = open_fds();
  for (int i = 0; i < n; ++i) killpg(runs[i].pid, SIGKILL);
  for (int i = 0; i < n; ++i) {
    siginfo_t si;
    waitid((idtype_t)P_PIDFD, (id_t)runs[i].pidfd, &si, WEXITED);
    close(runs[i].pidfd);
  }
  printf(
      "{\"runs\":%d,\"launch_s\":%.6f,\"rss_bytes_per_run\":%.1f,\"fds_per_run\":%.3f,"
      "\"peak_fds\":%d}\n",
      n, wall, (double)(rss1 - rss0) / n, (double)(fds1 - fds0) / n, fds1);
  return 0;
}

/* A load child: /bin/true started again as soon as it has exited. */
static void start_load(struct run* r, int ep, int slot) {
  char* argv[] = {(char*)"/bin/true", NULL};
  start_with(r, argv, 0);
  struct epoll_event e = {.events = EPOLLIN, .data = {.u64 = (uint64_t)slot + 1}};
  epoll_ctl(ep, EPOLL_CTL_ADD, r->pidfd, &e);
}

static int mode_wake(int n, const char* until, int load) {
  int64_t* lat = malloc(sizeof(int64_t) * (size_t)n);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  /* `load` other children cycling in the same loop: the wake-up under load. */
  struct run* others = calloc((size_t)(load > 0 ? load : 1), sizeof(struct run));
  for (int k = 0; k < load; ++k) start_load(&others[k], ep, k);
  for (int i = 0; i < n; ++i) {
    char deadline[32];
    snprintf(deadline, sizeof deadline, "%lld", (long long)(now_ns() + 20 * 1000000LL));
    char* argv[] = {(char*)until, deadline, NULL};
    struct run r;
    start(&r, argv);
    struct epoll_event e = {.events = EPOLLIN, .data = {.u64 = 0}};
    epoll_ctl(ep, EPOLL_CTL_ADD, r.pidfd, &e);
    int64_t woken = 0;
    while (!woken) {
      struct epoll_event got;
      int m = epoll_wait(ep, &got, 1, -1);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) die("epoll_wait");
      if (got.data.u64 == 0) {
        woken = now_ns();
        break;
      }
      /* a load child ended: reaped, and started again */
      struct run* o = &others[got.data.u64 - 1];
      siginfo_t si;
      waitid((idtype_t)P_PIDFD, (id_t)o->pidfd, &si, WEXITED);
      epoll_ctl(ep, EPOLL_CTL_DEL, o->pidfd, NULL);
      close(o->pidfd);
      start_load(o, ep, (int)(got.data.u64 - 1));
    }
    siginfo_t si;
    waitid((idtype_t)P_PIDFD, (id_t)r.pidfd, &si, WEXITED);
    epoll_ctl(ep, EPOLL_CTL_DEL, r.pidfd, NULL);
    close(r.pidfd);
    /* its last words: the time it exited */
    fcntl(r.out, F_SETFL, 0);
    char text[64];
    ssize_t m = read(r.out, text, sizeof text - 1);
    close(r.out);
    if (m <= 0) die("reading the exit time");
    text[m] = 0;
    lat[i] = woken - strtoll(text, NULL, 10);
  }
  for (int k = 0; k < load; ++k) {
    siginfo_t si;
    waitid((idtype_t)P_PIDFD, (id_t)others[k].pidfd, &si, WEXITED);
    close(others[k].pidfd);
  }
  printf("{\"runs\":%d,\"load\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f}\n", n, load, pct(lat, n, 0.5),
         pct(lat, n, 0.99));
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 5 && strcmp(argv[1], "spawn") == 0) return mode_spawn(atoi(argv[2]), atoi(argv[3]), argv + 4);
  if (argc >= 3 && strcmp(argv[1], "ingest") == 0) return mode_ingest(argv + 2);
  if (argc >= 4 && strcmp(argv[1], "hold") == 0) return mode_hold(atoi(argv[2]), argv + 3);
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "wake") == 0)
    return mode_wake(atoi(argv[2]), argv[3], argc == 5 ? atoi(argv[4]) : 0);
  fprintf(stderr,
          "usage: floor spawn N K PROG [ARGS] | ingest PROG [ARGS] | hold N PROG [ARGS] | wake N UNTIL [LOAD]\n");
  return 2;
}
