complete -c rdsend -l connect-timeout -d 'Keep retrying a refused connection this long (the receiver may start later)' -r
complete -c rdsend -l key-file -d 'Read the key from PATH (first line) instead of the KEY argument, which `ps` shows' -r -F
complete -c rdsend -l transport -d 'Transport to use' -r -f -a "auto\t'RDMA when both ends have an active RDMA device that reaches the peer, else TCP'
rdma\t'RDMA or fail (exit status 7)'
tcp\t'TCP only'"
complete -c rdsend -l chunk-size -d 'Bytes per chunk (RDMA slot / data frame), e.g. 256K, 1M. Both ends use the smaller of the two sizes asked for' -r
complete -c rdsend -l slots -d 'Buffers in flight (2 = double buffering). Pinned memory per process for RDMA is about chunk size × slots' -r
complete -c rdsend -l handshake-timeout -d 'How long the whole authentication handshake of one connection may take before that peer is dropped (more than 0)' -r
complete -c rdsend -l reconnect-timeout -d 'Seconds to keep trying to reconnect when the data connection dies mid-stream (a reset, a NAT that forgot the connection, an RDMA queue pair in the error state): rdsend dials again, rdrecv keeps listening for the same authenticated sender, and the stream resumes where the receiver is, byte-exact. 0: fail at once' -r
complete -c rdsend -l replay-window -d 'The sender keeps the last SIZE bytes it sent until the receiver has them, to resume after a reconnect (at least what can be in flight: ring plus socket buffers). A regular-file input is not copied: a resend reads the file again, from any offset. A pipe\'s pages are kept in pipes of the sender\'s (tee), not copied; a socket\'s bytes are copied. 0: nothing to resend from a pipe' -r
complete -c rdsend -l integrity -d 'How the stream is protected (the stronger of the two ends\' choices is used; see docs/security.md)' -r -f -a "auto\t'`encrypt` where this CPU has AES instructions (it then costs less CPU than `mac`), `mac` where it has not'
checksum\t'xxh3 checksum only: catches accidents, not an attacker on the path (for trusted fabrics; the fastest)'
mac\t'Keyed BLAKE3 MAC over the whole stream: nobody without the session keys can alter, reorder, drop or truncate data unnoticed'
encrypt\t'AES-256-GCM on every chunk: what `mac` guarantees, and nobody on the path can read the data (the same as `--encrypt`)'"
complete -c rdsend -l rate-limit -d 'Move at most RATE bytes per second, as `pv -L`: e.g. 500M, 1.5G/s, 64KiB/s (K, M, G, T are 1024-based; `B` and `/s` optional). The sender paces; a receiver\'s limit reaches the sender in the handshake, and the lower of the two ends\' limits applies' -r
complete -c rdsend -l compress -d 'Compress the stream, each chunk on its own with zstd, before it is sealed: `auto` (the bare flag) adapts the level to what binds, the link or the CPU, and stops trying on data that does not compress; `zstd:LEVEL` (1-19; `zstd` is level 3) is fixed. Compression is on when either end asks for it (the sender\'s choice wins); both ends must be builds that know it' -r
complete -c rdsend -l json -d 'Write a JSON report of the run to FILE at the end, also when it fails: peer, transport and device, bytes, checksum, seconds, rate, exit status, error' -r -F
complete -c rdsend -l gen-key -d 'Print a new random key (256 bits, 64 hex digits) for rdsend and rdrecv, and exit'
complete -c rdsend -l encrypt -d 'Encrypt the stream (AES-256-GCM, keys from the handshake), even on a CPU without AES instructions; either end asking for it is enough'
complete -c rdsend -s v -l verbose -d 'Print the transport used, the byte count and `Bandwidth X.XXX GB/s` on stderr at the end'
complete -c rdsend -s q -l quiet -d 'No progress line (unless --progress is given) and no warnings; errors are still printed'
complete -c rdsend -l progress -d 'Show a live progress line on stderr (bytes, rate, elapsed; percentage and ETA for a file source). On by default when stderr is a terminal'
complete -c rdsend -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rdsend -s V -l version -d 'Print version'
