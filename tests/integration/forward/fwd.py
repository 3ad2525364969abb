"""Servers and clients for the forward tests (tests/integration/forward.rs).

serve MODE PORT DIR: listens on 127.0.0.1:PORT, writes DIR/ready, and per
connection (each on a thread):
  sha    reads to end of file, answers "SHA256HEX LEN\n", closes;
  stall  like sha, but reads nothing until DIR/go exists;
  hold   reads to the end; logs how the connection ended to DIR/log
         ("eof" or "reset"), answers nothing.
Every connection's end is logged to DIR/log: "sha LEN", "eof", "reset".

Clients (each exits 0 only when what it checked held):
  sha PORT SIZE          sendall SIZE random bytes, half-close, expect the
                         digest back, then end of file;
  many PORT N            N concurrent sha clients of different sizes;
  reset PORT             send 1 MiB, then close with a TCP reset;
  closed PORT            expect the connection closed at once (no data);
  open PORT DIR          connect, write DIR/open, then wait: print how it
                         ended ("reset" or "eof");
  text PORT TEXT N       sendall TEXT N times, half-close, expect the digest;
  stall PORT SIZE DIR    sendall SIZE in a thread; print the bytes sent
                         after it stops advancing (to DIR/sent), then wait
                         for DIR/go and check the digest.
"""
import hashlib, os, socket, struct, sys, threading, time


def log(d, line):
    with open(os.path.join(d, "log"), "a") as f:
        f.write(line + "\n")


def serve(mode, port, d):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    open(os.path.join(d, "ready"), "w").close()

    def one(c):
        h, n = hashlib.sha256(), 0
        try:
            if mode == "stall":
                while not os.path.exists(os.path.join(d, "go")):
                    time.sleep(0.05)
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                h.update(b)
                n += len(b)
        except ConnectionResetError:
            log(d, "reset")
            c.close()
            return
        if mode == "hold":
            log(d, "eof")
            c.close()
            return
        try:
            c.sendall(("%s %d\n" % (h.hexdigest(), n)).encode())
            log(d, "sha %d" % n)
        except OSError:
            log(d, "reset")
        c.close()

    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def data(size, seed):
    out = bytearray()
    x = hashlib.sha256(b"%d" % seed).digest()
    while len(out) < size:
        x = hashlib.sha256(x).digest()
        out += x * 64
    return bytes(out[:size])


def check_digest(c, sent, what):
    """Reads c to its end: it must be the server's digest of `sent`."""
    r = b""
    while True:
        x = c.recv(4096)
        if not x:
            break
        r += x
    want = "%s %d\n" % (hashlib.sha256(sent).hexdigest(), len(sent))
    if r.decode() != want:
        raise SystemExit("%s: got %r, want %r" % (what, r, want))


def sha_client(port, size, seed=1, b=None):
    if b is None:
        b = data(size, seed) if size < (64 << 20) else os.urandom(size)
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b)
    c.shutdown(socket.SHUT_WR)
    check_digest(c, b, "port %d" % port)


def main():
    a = sys.argv[1:]
    if a[0] == "serve":
        serve(a[1], int(a[2]), a[3])
    elif a[0] == "sha":
        sha_client(int(a[1]), int(a[2]))
        print("OK")
    elif a[0] == "text":
        b = a[2].encode() * int(a[3])
        sha_client(int(a[1]), len(b), b=b)
        print("OK")
    elif a[0] == "many":
        port, n = int(a[1]), int(a[2])
        errs = []

        def t(i):
            try:
                sha_client(port, 1000 + i * 97_331, i)
            except BaseException as e:
                errs.append("%d: %s" % (i, e))

        ts = [threading.Thread(target=t, args=(i,)) for i in range(n)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        if errs:
            raise SystemExit("; ".join(errs))
        print("OK %d" % n)
    elif a[0] == "reset":
        c = socket.create_connection(("127.0.0.1", int(a[1])))
        c.sendall(b"x" * (1 << 20))
        time.sleep(0.3)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        print("RESET")
    elif a[0] == "closed":
        c = socket.create_connection(("127.0.0.1", int(a[1])))
        c.settimeout(20)
        try:
            x = c.recv(10)
        except ConnectionResetError:
            x = None
        if x != b"":
            raise SystemExit("expected a plain close, got %r" % (x,))
        print("CLOSED")
    elif a[0] == "open":
        c = socket.create_connection(("127.0.0.1", int(a[1])))
        c.sendall(b"hello")
        open(os.path.join(a[2], "open"), "w").close()
        try:
            x = c.recv(10)
            print("eof" if x == b"" else "data")
        except ConnectionResetError:
            print("reset")
    elif a[0] == "stall":
        port, size, d = int(a[1]), int(a[2]), a[3]
        b = os.urandom(size)
        c = socket.create_connection(("127.0.0.1", port))
        sent = [0]

        def w():
            v = memoryview(b)
            while sent[0] < size:
                sent[0] += c.send(v[sent[0]:sent[0] + (1 << 20)])
            c.shutdown(socket.SHUT_WR)

        th = threading.Thread(target=w, daemon=True)
        th.start()
        last, still = -1, 0
        while still < 20:
            time.sleep(0.1)
            if sent[0] == last:
                still += 1
            else:
                last, still = sent[0], 0
        with open(os.path.join(d, "sent"), "w") as f:
            f.write("%d\n" % sent[0])
        while not os.path.exists(os.path.join(d, "go")):
            time.sleep(0.05)
        th.join()
        check_digest(c, b, "stall")
        print("OK %d" % last)


main()
