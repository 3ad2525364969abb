#!/bin/bash
# Guest script for selftest.sh: print the arguments, then exit with status $1.
printf 'arg: <%s>\n' "$@"
exit "${1:-0}"
