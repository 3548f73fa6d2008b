# Shared by the job tests of tests/tools (sourced after each defines `fail MESSAGE`).

# pid_of NAME LOG: prints the pid `dlrm launch` reported in LOG for NAME ("server 1"),
# once it has; returns 1 after 5 s without one.
pid_of() {
  local pid=""
  for _ in $(seq 1 100); do
    pid=$(sed -n "s/^launch: $1 is pid \([0-9]*\)$/\1/p" "$2")
    [ -n "$pid" ] && break
    sleep 0.05
  done
  [ -n "$pid" ] || return 1
  echo "$pid"
}

# await_file FILE PID WHAT: returns once FILE exists; fails the test (naming WHAT) if the
# process PID ends first or 60 s pass.
await_file() {
  for _ in $(seq 1 600); do
    [ -f "$1" ] && return 0
    kill -0 "$2" 2> /dev/null || fail "the job ended before $3"
    sleep 0.1
  done
  fail "no $3 after 60 s"
}
