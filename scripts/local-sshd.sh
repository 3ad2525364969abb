# Sourced by the benchmark scripts: one sshd on 127.0.0.1 (a high port,
# generated keys) whose aliases h1, h2, h3 all reach it, as the integration
# tests set it up. Its sessions get a scratch HOME (sshd's SetEnv), so the
# login shell reads no rc file of this account.
#   local_sshd DIR [own-homes [N]]
#                    start it (files in DIR); sets SSHD_PID (the pids, one
#                    sshd per 16 addresses, sshd's limit) and writes
#                    DIR/ssh_config; returns 1 when it does not come up.
#                    With own-homes, h1 .. hN (N = 3 unless given, at most
#                    250) are 127.0.0.1 .. 127.0.0.N, each with a HOME of
#                    its own (DIR/home-h1, ...) as real hosts have: a
#                    self-installed agent is installed once per host and
#                    found in that host's cache.
# The caller kills $SSHD_PID (unquoted) on exit.
local_sshd() {
    local W=$1 own=${2:-} n=${3:-3} port i
    [ "$own" = own-homes ] || n=3
    ssh-keygen -q -t ed25519 -N '' -f "$W/host_key" || return 1
    ssh-keygen -q -t ed25519 -N '' -f "$W/id" || return 1
    cp "$W/id.pub" "$W/authorized_keys"
    mkdir -p "$W/home"
    [ "$(id -u)" = 0 ] && mkdir -p /run/sshd
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat >"$W/sshd.conf" <<EOF
Port $port
HostKey $W/host_key
PidFile $W/sshd.pid
AuthorizedKeysFile $W/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
LogLevel ERROR
MaxStartups 300:30:500
Subsystem sftp internal-sftp
EOF
    : >"$W/ssh_config"
    if [ "$own" = own-homes ]; then
        for i in $(seq 1 "$n"); do
            mkdir -p "$W/home-h$i"
            printf 'Match LocalAddress 127.0.0.%s\n  SetEnv HOME=%s\n' "$i" "$W/home-h$i" >>"$W/sshd.conf"
            printf 'Host h%s\n  HostName 127.0.0.%s\n  Port %s\n' "$i" "$i" "$port" >>"$W/ssh_config"
        done
    else
        echo "SetEnv HOME=$W/home" >>"$W/sshd.conf"
        printf 'Host h1 h2 h3\n  HostName 127.0.0.1\n  Port %s\n' "$port" >>"$W/ssh_config"
    fi
    cat >>"$W/ssh_config" <<EOF
Host *
  User $(id -un)
  IdentityFile $W/id
  IdentitiesOnly yes
  UserKnownHostsFile $W/known_hosts
  StrictHostKeyChecking yes
  LogLevel ERROR
EOF
    for i in $(seq 1 "$n"); do
        echo "[127.0.0.$i]:$port $(cut -d' ' -f1-2 "$W/host_key.pub")"
    done >"$W/known_hosts"
    # sshd listens on at most 16 addresses: one sshd per 16 hosts, on the
    # same port (ListenAddress lines go before any Match block).
    SSHD_PID=
    local first g
    for first in $(seq 1 16 "$n"); do
        g=$W/sshd-$first
        for i in $(seq "$first" $((first + 15))); do
            [ "$i" -le "$n" ] && echo "ListenAddress 127.0.0.$i"
        done >"$g.conf"
        sed "s|^PidFile .*|PidFile $g.pid|" "$W/sshd.conf" >>"$g.conf"
        /usr/sbin/sshd -D -e -f "$g.conf" 2>>"$W/sshd.log" &
        SSHD_PID="$SSHD_PID $!"
    done
    for first in $(seq 1 16 "$n"); do
        for _ in $(seq 1 200); do
            ssh -F "$W/ssh_config" -o BatchMode=yes "h$first" true 2>/dev/null && break
            sleep 0.05
        done
        ssh -F "$W/ssh_config" -o BatchMode=yes "h$first" true || { echo "sshd did not come up: $(cat "$W/sshd.log")" >&2; return 1; }
    done
}
