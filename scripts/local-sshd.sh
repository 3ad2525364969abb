# Sourced by the benchmark scripts: one sshd on 127.0.0.1 (a high port,
# generated keys) whose aliases h1, h2, h3 all reach it, as the integration
# tests set it up. Its sessions get a scratch HOME (sshd's SetEnv), so the
# login shell reads no rc file of this account.
#   local_sshd DIR   start it (files in DIR); sets SSHD_PID and writes
#                    DIR/ssh_config; returns 1 when it does not come up.
# The caller kills $SSHD_PID on exit.
local_sshd() {
    local W=$1 port
    ssh-keygen -q -t ed25519 -N '' -f "$W/host_key" || return 1
    ssh-keygen -q -t ed25519 -N '' -f "$W/id" || return 1
    cp "$W/id.pub" "$W/authorized_keys"
    mkdir -p "$W/home"
    [ "$(id -u)" = 0 ] && mkdir -p /run/sshd
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat >"$W/sshd.conf" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $W/host_key
PidFile $W/sshd.pid
AuthorizedKeysFile $W/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
LogLevel ERROR
MaxStartups 50:30:100
Subsystem sftp internal-sftp
SetEnv HOME=$W/home
EOF
    cat >"$W/ssh_config" <<EOF
Host h1 h2 h3
  HostName 127.0.0.1
  Port $port
Host *
  User $(id -un)
  IdentityFile $W/id
  IdentitiesOnly yes
  UserKnownHostsFile $W/known_hosts
  StrictHostKeyChecking yes
  LogLevel ERROR
EOF
    echo "[127.0.0.1]:$port $(cut -d' ' -f1-2 "$W/host_key.pub")" >"$W/known_hosts"
    /usr/sbin/sshd -D -e -f "$W/sshd.conf" 2>"$W/sshd.log" &
    SSHD_PID=$!
    for _ in $(seq 1 200); do
        ssh -F "$W/ssh_config" -o BatchMode=yes h1 true 2>/dev/null && break
        sleep 0.05
    done
    ssh -F "$W/ssh_config" -o BatchMode=yes h1 true || { echo "sshd did not come up: $(cat "$W/sshd.log")" >&2; return 1; }
}
