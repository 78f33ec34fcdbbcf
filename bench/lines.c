/* lines BYTES: writes BYTES bytes of 100-byte lines to stdout, 64 KiB per
 * write: the job whose output the log-ingest benchmarks read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  unsigned long long left = strtoull(argv[1], NULL, 10);
  static char buf[65500]; /* 655 whole lines */
  for (size_t i = 0; i < sizeof buf; i += 100) {
    memset(buf + i, 'a' + (int)(i / 100 % 26), 99);
    buf[i + 99] = '\n';
  }
  while (left > 0) {
    size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
    const char* p = buf;
    size_t todo = n;
    while (todo > 0) {
      ssize_t w = write(1, p, todo);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return 1;
      p += w;
      todo -= (size_t)w;
    }
    left -= n;
  }
  return 0;
}
