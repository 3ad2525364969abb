complete -c rdpipe -l to -d 'Fan-out: deliver the stream to this sink too (repeatable; HOST:CMD, HOST:\'> FILE\' or HOST:\'>> FILE\'). The sinks form a chain in the order given: each host feeds its command and relays the same bytes to the next, so the source sends each byte once; the chain runs at the slowest sink\'s speed. A failing sink command does not stop the others. The sink\'s command stdout goes to rdpipe\'s stderr, prefixed with its host' -r
complete -c rdpipe -l min-ok -d 'With --to: succeed when at least N sinks succeeded (default: all)' -r
complete -c rdpipe -l replay-window -d 'With --to: each relaying sink keeps the last SIZE bytes it relayed (ordinary memory, allocated as the stream passes), so that when the next sink\'s host dies the chain re-links around it: the relay connects straight to the sink after it, which resumes where it was, byte-exact and verified. A sink further behind than that fails with a message saying so. 0 turns re-linking off (the sinks after a dead one fail)' -r
complete -c rdpipe -s o -l ssh-option -d 'An option for ssh, as for `ssh -o` (repeatable), e.g. `-o Port=2222`. Applies to every host; host-specific settings belong in the ssh configuration' -r
complete -c rdpipe -s F -l ssh-config -d 'An ssh configuration file instead of ~/.ssh/config, as for `ssh -F`' -r -F
complete -c rdpipe -l data-host -d 'The address the other hosts use to reach HOST\'s data endpoints, e.g. an IPoIB address (repeatable), used as given. Default: HOST\'s HostName in the ssh configuration, else HOST itself; when that is not one of the RDMA-capable addresses HOST\'s endpoint reports (netdevs of ACTIVE RDMA ports), one of those on a subnet the connecting host shares is used instead, else one the connecting host routes to over its RDMA-capable addresses and that answers (not with --transport tcp; -v says which)' -r
complete -c rdpipe -l remote-bin -d 'Directory holding rdrecv on the remote hosts (default: found in PATH, else installed by rdpipe itself). rdpipe runs DIR/rdrecv and installs nothing' -r
complete -c rdpipe -l transport -d 'Transport for the data' -r -f -a "auto\t'RDMA when both ends have an active RDMA device that reaches the peer, else TCP'
rdma\t'RDMA or fail (exit status 7)'
tcp\t'TCP only'"
complete -c rdpipe -l chunk-size -d 'Bytes per chunk, e.g. 256K, 1M' -r
complete -c rdpipe -l slots -d 'Buffers in flight per transfer' -r
complete -c rdpipe -l connect-timeout -d 'Seconds to keep trying to connect (ssh and data connections)' -r
complete -c rdpipe -l handshake-timeout -d 'Seconds the authentication handshake of each transfer may take' -r
complete -c rdpipe -l integrity -d 'How each hop is protected (`auto`: `encrypt` where rdpipe\'s host has AES instructions, else `mac`; see docs/security.md)' -r -f -a "auto\t'`encrypt` where this CPU has AES instructions (it then costs less CPU than `mac`), `mac` where it has not'
checksum\t'xxh3 checksum only: catches accidents, not an attacker on the path (for trusted fabrics; the fastest)'
mac\t'Keyed BLAKE3 MAC over the whole stream: nobody without the session keys can alter, reorder, drop or truncate data unnoticed'
encrypt\t'AES-256-GCM on every chunk: what `mac` guarantees, and nobody on the path can read the data (the same as `--encrypt`)'"
complete -c rdpipe -l rate-limit -d 'Move at most RATE bytes per second through every hop, as `pv -L`: e.g. 500M, 1.5G/s, 64KiB/s (K, M, G, T are 1024-based; `B` and `/s` optional). Each hop\'s sender paces (the endpoints on the hosts and rdpipe\'s own)' -r
complete -c rdpipe -l json -d 'Write a JSON report of the run to FILE at the end, also when it fails or is interrupted: per hop the transport, bytes, checksum, seconds and rate; per segment the host, command and exit status or signal; the verdict' -r -F
complete -c rdpipe -l max-sessions -d 'SSH sessions per master connection (sshd\'s MaxSessions, 10 by default); a host with more segments gets more connections' -r
complete -c rdpipe -s n -l dry-run -d 'Print the plan (segments, hosts, who listens, who connects to whom) and run nothing'
complete -c rdpipe -s v -l verbose -d 'Print each hop\'s transport, byte count and checksum, and the final `Bandwidth X.XXX GB/s`, on stderr. `-vv` adds a debug log of the set-up and teardown (ssh masters, agents, control lines; the hosts\' endpoints log theirs too), `-vvv` a trace; RUST_LOG overrides both'
complete -c rdpipe -s q -l quiet -d 'No progress line (unless --progress is given) and no warnings (from any host); errors are still printed'
complete -c rdpipe -l progress -d 'Show a live progress line on stderr: bytes arrived at the end of the pipeline, rate, elapsed time; when the source is a `< FILE` segment or a regular file on stdin, the source\'s bytes sent, rate, percentage and ETA. On by default when stderr is a terminal'
complete -c rdpipe -l no-install -d 'Do not install rdpipe\'s own binary on hosts without a usable rdrecv: such a host fails the pipeline (exit 127 when rdrecv is missing). By default rdpipe copies itself over the SSH connection into ~/.cache/rdma-pipe/VERSION-HASH/ there (checked by checksum, reused by later runs) when rdrecv is not in PATH or speaks another agent protocol, after checking the host\'s architecture and glibc version'
complete -c rdpipe -l encrypt -d 'Encrypt every hop (AES-256-GCM, keys from each hop\'s handshake), even where rdpipe\'s host has no AES instructions'
complete -c rdpipe -l direct -d 'Write the `> FILE` and `>> FILE` segments with O_DIRECT, past the page cache (as `rdrecv --direct`): for big sequential streams to fast disks. A filesystem that refuses it is written the usual way (-v notes it); `--to` sinks\' `> FILE` too'
complete -c rdpipe -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rdpipe -s V -l version -d 'Print version'
