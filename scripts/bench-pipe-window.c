// scripts/bench-pipe-window.c: read a pipe to its end 1 MiB at a time, read
// every byte once more (as the sender's hash does), and keep the last WIN_MIB
// read resendable by one method; print CPU s/GB (user+sys of this process).
// The measurement behind docs/performance.md "Reconnecting hops": what any
// way of keeping a pipe's bytes costs a reader that does nothing else.
//   cc -O2 -o /tmp/bench-pipe-window scripts/bench-pipe-window.c
//   cat FILE | /tmp/bench-pipe-window METHOD WIN_MIB
// METHOD: none (nothing kept) | tee (tee(2) into 1 MiB pipes first, the oldest
// closed: what rdsend does) | copy (memcpy into a ring) | stream (the same copy
// with non-temporal stores: no read for ownership of the ring's cache lines) |
// direct (read straight into the ring, no buffer: the copy the read makes is the
// only one).
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#define BUF (1 << 20)
static volatile uint64_t sink;
static void hash(const unsigned char *p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) s ^= *(const uint64_t *)(p + i);
  sink += s;
}
static void stream(unsigned char *d, const unsigned char *s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128((__m128i *)(d + i + k), _mm_loadu_si128((const __m128i *)(s + i + k)));
  memcpy(d + i, s + i, n - i);
  _mm_sfence();
}
// Copies n bytes at stream offset `at` into the ring of `win` bytes.
static void keep(unsigned char *ring, size_t win, uint64_t at, const unsigned char *b, size_t n, int nt) {
  size_t a = at % win, first = win - a < n ? win - a : n;
  if (nt) { stream(ring + a, b, first); stream(ring, b + first, n - first); }
  else { memcpy(ring + a, b, first); memcpy(ring, b + first, n - first); }
}
int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s none|tee|copy|stream|direct WIN_MIB\n", argv[0]); return 2; }
  const char *m = argv[1];
  size_t win = (size_t)atol(argv[2]) << 20;
  fcntl(0, F_SETPIPE_SZ, BUF);
  unsigned char *buf = aligned_alloc(4096, BUF), *ring = aligned_alloc(4096, win);
  memset(buf, 0, BUF);
  int pipes[1024][2], np = 0, max_pipes = win / BUF + 1;
  size_t in_newest = BUF;
  uint64_t total = 0;
  for (;;) {
    ssize_t n;
    if (!strcmp(m, "direct")) {
      size_t a = total % win, want = win - a < BUF ? win - a : BUF;
      if ((n = read(0, ring + a, want)) <= 0) break;
      hash(ring + a, n);
    } else if (!strcmp(m, "tee")) {
      if (in_newest >= BUF) {
        if (np == max_pipes) {
          close(pipes[0][0]); close(pipes[0][1]);
          memmove(pipes, pipes + 1, sizeof pipes[0] * --np);
        }
        if (pipe2(pipes[np], O_NONBLOCK) || fcntl(pipes[np][1], F_SETPIPE_SZ, BUF) < 0) { perror("pipe"); return 1; }
        np++; in_newest = 0;
      }
      ssize_t t = tee(0, pipes[np - 1][1], BUF, 0);
      if (t < 0) { in_newest = BUF; continue; }  // the newest pipe is full
      if (t == 0) break;
      for (n = 0; n < t;) n += read(0, buf + n, t - n);
      hash(buf, n);
      in_newest += n;
    } else {
      if ((n = read(0, buf, BUF)) <= 0) break;
      hash(buf, n);
      if (!strcmp(m, "copy")) keep(ring, win, total, buf, n, 0);
      else if (!strcmp(m, "stream")) keep(ring, win, total, buf, n, 1);
    }
    total += n;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  printf("%s %s MiB: %.3f s/GB (%lu bytes)\n", m, argv[2], cpu / (total / 1e9), (unsigned long)total);
  return 0;
}
