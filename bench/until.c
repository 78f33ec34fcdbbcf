/* until DEADLINE_NS: sleeps until CLOCK_MONOTONIC reaches DEADLINE_NS, then
 * writes the CLOCK_MONOTONIC time at which it exits (ns, one line) and exits 0:
 * whoever waits for it can tell how long after its exit the wait ended (the
 * time it oversleeps its deadline is the machine's, not the waiter's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  long long d = strtoll(argv[1], NULL, 10);
  struct timespec ts = {.tv_sec = d / 1000000000LL, .tv_nsec = d % 1000000000LL};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  char line[32];
  int n = snprintf(line, sizeof line, "%lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
  return write(1, line, (size_t)n) == n ? 0 : 1;
}
