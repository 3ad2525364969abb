complete -c rdpipe-doctor -l size -d 'Bytes each test transfer moves (0: none), e.g. 64M, 1G' -r
complete -c rdpipe-doctor -s o -l ssh-option -d 'An option for ssh, as for `ssh -o` (repeatable)' -r
complete -c rdpipe-doctor -s F -l ssh-config -d 'An ssh configuration file instead of ~/.ssh/config, as for `ssh -F`' -r -F
complete -c rdpipe-doctor -l data-host -d 'The address the other hosts use to reach HOST\'s data endpoints (repeatable), as for rdpipe' -r
complete -c rdpipe-doctor -l remote-bin -d 'Directory holding rdrecv on the remote hosts (default: found in PATH, else installed as a pipeline would)' -r
complete -c rdpipe-doctor -l chunk-size -d 'The chunk size the transfers will use (what a transfer pins is this times --slots)' -r
complete -c rdpipe-doctor -l slots -d 'The buffers in flight the transfers will use' -r
complete -c rdpipe-doctor -l connect-timeout -d 'Seconds to keep trying to connect (ssh and data connections)' -r
complete -c rdpipe-doctor -l json -d 'Print the report as JSON on stdout instead of text'
complete -c rdpipe-doctor -l no-install -d 'Do not install the agent on hosts without a usable rdrecv: report it'
complete -c rdpipe-doctor -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rdpipe-doctor -s V -l version -d 'Print version'
