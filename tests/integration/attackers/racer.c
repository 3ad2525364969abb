/* A local attacker for tests/integration/attacks_local.rs: run as another uid,
 * it watches DIR with inotify and opens every file created or moved there
 * as soon as it is reported, holding each descriptor (a descriptor survives
 * the file's rename). When a file named `stop` appears it reads from every
 * descriptor it holds and prints one line: `TRIED OPENED LEAKED` (files it
 * saw, files it could open, descriptors that then read any byte).
 * It prints `ready` once it watches. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#define MAX_HELD 900

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: racer DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    int in = inotify_init1(0);
    if (in < 0 || inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO) < 0) {
        perror("inotify");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    static int held[MAX_HELD];
    int n = 0, tried = 0, opened = 0, leaked = 0;
    static char buf[1 << 16] __attribute__((aligned(8)));
    for (;;) {
        ssize_t len = read(in, buf, sizeof buf);
        if (len <= 0)
            return 1;
        for (char *p = buf; p < buf + len;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            p += sizeof *ev + ev->len;
            if (ev->len == 0)
                continue;
            if (strcmp(ev->name, "stop") == 0)
                goto done;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, ev->name);
            tried++;
            int fd = open(path, O_RDONLY | O_NONBLOCK);
            if (fd >= 0) {
                opened++;
                if (n < MAX_HELD)
                    held[n++] = fd;
                else
                    close(fd);
            }
        }
    }
done:
    for (int i = 0; i < n; i++) {
        char b[64];
        if (pread(held[i], b, sizeof b, 0) > 0)
            leaked++;
    }
    printf("%d %d %d\n", tried, opened, leaked);
    return 0;
}
