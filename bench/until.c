/* until DEADLINE_NS: sleeps until CLOCK_MONOTONIC reaches DEADLINE_NS, then
 * exits 0: a job whose exit time is known to whoever waits for it. */
#include <stdlib.h>
#include <time.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  long long d = strtoll(argv[1], NULL, 10);
  struct timespec ts = {.tv_sec = d / 1000000000LL, .tv_nsec = d % 1000000000LL};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
  return 0;
}
