# shellcheck shell=bash
# engage beside the Node peer (bench/peer), sourced by bench/run: both on the same Redis and
# the same data under one key prefix, seeded by bench_seed through engage (10 items of 20
# remarks, a board of 500 members), each with voters and users signing in of its own so that
# every like and sign-in is new to the server that takes it. Each scenario of each run goes
# to engage, to the peer without graphql-jit and to the peer with it (two peer processes,
# idle in turn), 64 connections for CMP_DURATION seconds. Per server: requests, p99, its CPU
# (utime + stime of its processes, until it is idle again) and Redis's (INFO cpu) over the
# requests.

# The CPU ticks of processes $@, summed.
ticks_of() {
  local pid total=0
  for pid in "$@"; do
    total=$(( total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat") ))
  done
  echo "$total"
}

# Redis's CPU seconds so far (user + system, its main thread and the others).
redis_cpu() {
  redis-cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'
}

# Waits (up to 20 s) until processes $@ are idle, as `settle` does for the server.
settle_pids() {
  local last now
  last=$(ticks_of "$@")
  for _ in $(seq 40); do
    sleep 0.5
    now=$(ticks_of "$@")
    (( now - last <= 1 )) && return
    last=$now
  done
}

# A peer process and its workers (PEER_WORKERS > 1: node:cluster's children).
peer_pids() {
  echo "$1" $(pgrep -P "$1" || true)
}

# start_peer JIT PORT: starts a peer on the comparison's data; sets PEER_PID.
start_peer() {
  env PEER_PORT="$2" PEER_REDIS_PREFIX="$CMP_PREFIX" PEER_DATABASE="$WORK/compare.db" \
    PEER_JIT="$1" PEER_WORKERS="$PEER_WORKERS" NODE_ENV=production \
    node bench/peer/server.mjs >>"$WORK/peer.log" 2>&1 &
  PEER_PID=$!
  PEERS+=("$PEER_PID")
  until curl -sf "http://127.0.0.1:$2/readyz" >/dev/null 2>&1; do
    kill -0 "$PEER_PID" 2>/dev/null || { cat "$WORK/peer.log"; exit 1; }
    sleep 0.05
  done
  # Its workers are up once each answers; give them a moment to all listen.
  [ "$PEER_WORKERS" = 1 ] || sleep 1
}

# GraphQL errors answered so far: engage's from /metrics, a peer's from /errors.
errors_of() {
  case "$1" in
    engage) graphql_errors ;;
    *) curl -s "http://127.0.0.1:$2/errors" ;;
  esac
}

# cmp_run SERVER RUN SCRIPT [ARGS...]: one scenario against one server (engage, peer or
# peer-jit), recorded with `"compare": SERVER`.
cmp_run() {
  local server=$1 run=$2 script=$3 port dir pids before cpu redis line
  shift 3
  case "$server" in
    engage) port=$PORT dir="$WORK/cmp-engage" pids="$SERVER" ;;
    peer) port=$PEER_PORT dir="$WORK/cmp-peer" pids=$(peer_pids "$PEER_PLAIN") ;;
    peer-jit) port=$(( PEER_PORT + 1 )) dir="$WORK/cmp-peer" pids=$(peer_pids "$PEER_JIT") ;;
  esac
  # shellcheck disable=SC2086 # pids: a list of numbers
  {
    before=$(errors_of "$server" "$port")
    cpu=$(ticks_of $pids)
    redis=$(redis_cpu)
    line=$(wrk -t2 -c64 -d"${CMP_DURATION}s" --timeout 5s -s "bench/wrk/$script" \
      "http://127.0.0.1:$port" -- "$dir" "$@" | tee -a "$WORK/wrk-compare.log" | sed -n 's/^RESULT //p')
    settle_pids $pids
    line=$(awk -v line="$line" -v a="$cpu" -v b="$(ticks_of $pids)" -v t="$TICK" \
      -v ra="$redis" -v rb="$(redis_cpu)" -v server="$server" -v errors="$(( $(errors_of "$server" "$port") - before ))" \
      'BEGIN { sub(/}$/, "", line); printf "%s,\"server_cpu_s\":%.2f,\"redis_cpu_s\":%.3f,\"graphql_errors\":%d,\"connections\":64,\"compare\":\"%s\"}", line, (b - a) / t, rb - ra, errors, server }')
  }
  record "$run" "$line"
  echo "$line"
}

compare_with_peer() {
  step "engage beside the Node peer: 10 items x 20 remarks, 500 board members, $RUNS runs of ${CMP_DURATION}s"
  SERVER_PREFIX="$CMP_PREFIX" start_server "sqlite://$WORK/compare.db"
  # Sign-in files: engage's run r is signin-r; the peer's signin-r without graphql-jit and
  # signin-(RUNS + 1 + r) with it (run 0: the warm-ups).
  "$BIN/examples/bench_seed" --url "$URL/graphql" --prefix "$CMP_PREFIX" --out "$WORK/cmp-engage" \
    --peer-out "$WORK/cmp-peer" --database-url "sqlite://$WORK/compare.db" \
    --items 10 --remarks 20 --voters "$CMP_VOTERS" --members 500 \
    --runs $(( 2 * RUNS + 1 )) --sign-ins-per-run "$CMP_SIGN_INS"
  start_peer 0 "$PEER_PORT"
  PEER_PLAIN=$PEER_PID
  start_peer 1 $(( PEER_PORT + 1 ))
  PEER_JIT=$PEER_PID
  for port in "$PEER_PORT" $(( PEER_PORT + 1 )); do
    if node bench/peer/check.mjs --engage "$URL" --peer "http://127.0.0.1:$port" \
      --fixtures "$WORK/cmp-engage" >"$WORK/check-$port.txt" 2>&1; then
      record 1 "{\"scenario\":\"peer check\",\"port\":$port,\"passed\":true}"
      tail -1 "$WORK/check-$port.txt"
    else
      record 1 "{\"scenario\":\"peer check\",\"port\":$port,\"passed\":false}"
      cat "$WORK/check-$port.txt"
    fi
  done
  for run in $(seq 0 "$RUNS"); do
    local duration=$CMP_DURATION
    [ "$run" = 0 ] && CMP_DURATION=3
    for server in engage peer peer-jit; do
      local signing=$run
      [ "$server" = peer-jit ] && signing=$(( RUNS + 1 + run ))
      # engage's archive and points consumers read the streams the peer's likes and
      # sign-ins write to: engage is stopped while the peer is measured, and drains them
      # (unmeasured) before its own next scenario.
      [ "$server" = peer ] && kill -STOP "$SERVER"
      cmp_run "$server" "$run" like_remark.lua
      cmp_run "$server" "$run" remarks_page.lua
      cmp_run "$server" "$run" sign_in.lua "$signing" 2
      cmp_run "$server" "$run" leaderboard.lua
    done
    # The peer's runs left engage's consumers tens of thousands of events: engage is idle
    # again before its next measured scenario, however long they take.
    kill -CONT "$SERVER"
    settle 300
    CMP_DURATION=$duration
  done
  for peer in "${PEERS[@]}"; do kill "$peer" 2>/dev/null && wait "$peer" 2>/dev/null || true; done
  PEERS=()
  stop_server
  redis-cli --scan --pattern "${CMP_PREFIX}*" | xargs -r -n 1000 redis-cli UNLINK >/dev/null
}
