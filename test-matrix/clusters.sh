# Cluster profiles, sourced by lib.sh: stores of three members on loopback, each member a process
# of its own under .state/<name>/<n>/ with its own pid and log, so a fault run can kill, pause and
# restart one member (`lib.sh node <name> <n> kill|pause|resume|start|stop|pid`). A fresh cluster at
# every `up`; a member's `start` keeps its data (a restarted member rejoins).

# --- etcd-cluster: three members, clients on 23791-23793, peers on 23801-23803 -----------------
ETCDC_CLIENT=(23791 23792 23793)
ETCDC_PEER=(23801 23802 23803)
etcdc_initial() { local i s=''; for i in 1 2 3; do s+="${s:+,}m$i=http://127.0.0.1:${ETCDC_PEER[$((i-1))]}"; done; echo "$s"; }
etcd-cluster_member_health() { curl -sf --max-time 2 "http://127.0.0.1:${ETCDC_CLIENT[$(($1-1))]}/health" | grep -q '"health":"true"'; }
etcd-cluster_health() { local i; for i in 1 2 3; do etcd-cluster_member_health "$i" || return 1; done; }
etcd-cluster_install() { etcd_install; }
etcd-cluster_member_start() {
  local i=$1 dir="$STATE/etcd-cluster/$1" state=existing
  mkdir -p "$dir"
  [ -d "$dir/data/member" ] || state=new
  setsid etcd --name "m$i" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:${ETCDC_CLIENT[$((i-1))]}" --advertise-client-urls "http://127.0.0.1:${ETCDC_CLIENT[$((i-1))]}" \
    --listen-peer-urls "http://127.0.0.1:${ETCDC_PEER[$((i-1))]}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCDC_PEER[$((i-1))]}" \
    --initial-cluster "$(etcdc_initial)" --initial-cluster-state "$state" --initial-cluster-token deadbolt-cluster \
    --log-level warn >>"$dir/etcd.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
}
etcd-cluster_start() {
  rm -rf "$STATE"/etcd-cluster/[123]
  local i; for i in 1 2 3; do etcd-cluster_member_start "$i"; done
  cp "$STATE/etcd-cluster/1/member.pid" "$STATE/etcd-cluster/etcd-cluster.pid"
}
etcd-cluster_member_port() { echo "${ETCDC_CLIENT[$(($1-1))]}"; }
etcd-cluster_stop() { local i; for i in 1 2 3; do member_signal etcd-cluster "$i" TERM; stop_pid "$(listener_pid "${ETCDC_CLIENT[$((i-1))]}")"; done; }
etcd-cluster_version() { etcd-cluster_health && echo "etcd cluster of 3 ($(curl -sf --max-time 2 "http://127.0.0.1:${ETCDC_CLIENT[0]}/version" | sed -n 's/.*"etcdserver":"\([^"]*\)".*/etcd \1/p'))"; }

# --- zookeeper-ensemble: three servers, clients on 21811-21813, quorum 28881-3, election 38881-3 ----
ZKE_CLIENT=(21811 21812 21813)
zke_cmd() { exec 3<>"/dev/tcp/127.0.0.1/$1" && printf '%s' "$2" >&3 && timeout 2 cat <&3; }
zookeeper-ensemble_member_health() { zke_cmd "${ZKE_CLIENT[$(($1-1))]}" srvr 2>/dev/null | grep -qE '^Mode: (leader|follower)'; }
zookeeper-ensemble_health() { local i; for i in 1 2 3; do zookeeper-ensemble_member_health "$i" || return 1; done; }
zookeeper-ensemble_install() { zookeeper_install; }
zookeeper-ensemble_member_start() {
  local i=$1 dir="$STATE/zookeeper-ensemble/$1"
  mkdir -p "$dir/data"
  echo "$i" > "$dir/data/myid"
  {
    sed -e "s#@DATA@#$dir/data#" -e "s#^clientPort=.*#clientPort=${ZKE_CLIENT[$((i-1))]}#" "$TM_DIR/zookeeper/zoo.cfg"
    echo 'initLimit=10'
    echo 'syncLimit=4'
    echo '4lw.commands.whitelist=srvr,ruok,mntr'
    local n; for n in 1 2 3; do echo "server.$n=127.0.0.1:$((28880 + n)):$((38880 + n))"; done
  } > "$dir/zoo.cfg"
  setsid java -Xmx192m -Dzookeeper.admin.enableServer=false -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >>"$dir/zookeeper.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
}
zookeeper-ensemble_start() {
  rm -rf "$STATE"/zookeeper-ensemble/[123]
  local i; for i in 1 2 3; do zookeeper-ensemble_member_start "$i"; done
  cp "$STATE/zookeeper-ensemble/1/member.pid" "$STATE/zookeeper-ensemble/zookeeper-ensemble.pid"
}
zookeeper-ensemble_member_port() { echo "${ZKE_CLIENT[$(($1-1))]}"; }
zookeeper-ensemble_stop() { local i; for i in 1 2 3; do member_signal zookeeper-ensemble "$i" TERM; stop_pid "$(listener_pid "${ZKE_CLIENT[$((i-1))]}")"; done; }
zookeeper-ensemble_version() { zookeeper-ensemble_health && echo "ZooKeeper ensemble of 3 ($(zke_cmd "${ZKE_CLIENT[0]}" srvr 2>/dev/null | sed -n 's/^Zookeeper version: \([^-,]*\).*/ZooKeeper \1/p'))"; }

# --- members -----------------------------------------------------------------------------------
# A member's pid: whoever listens on its port (a pid file goes stale when a member dies on its
# own or was started twice), else the one recorded when it was started (a paused member still listens).
member_pid() {
  local pid; pid=$(listener_pid "$("${1}_member_port" "$2")")
  if [ -n "$pid" ]; then
    [ -d "$STATE/$1/$2" ] && echo "$pid" > "$STATE/$1/$2/member.pid" # not for a cluster another checkout started
    echo "$pid"
  else cat "$STATE/$1/$2/member.pid" 2>/dev/null; fi
}

# Whether this checkout started the cluster that answers: every member's pid is one of ours.
cluster_reusable() {
  [ -f "$STATE/$1/owned" ] || return 1
  local n pid; for n in 1 2 3; do
    pid=$(cat "$STATE/$1/$n/member.pid" 2>/dev/null) && [ "$(listener_pid "$("${1}_member_port" "$n")")" = "$pid" ] || return 1
  done
}
etcd-cluster_reusable() { cluster_reusable etcd-cluster; }
zookeeper-ensemble_reusable() { cluster_reusable zookeeper-ensemble; }

# member_signal NAME N SIGNAL: TERM waits for the exit (then KILL after 30 s); KILL waits too.
member_signal() {
  local pid; pid=$(member_pid "$1" "$2") || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -CONT "$pid" 2>/dev/null || true
  case $3 in
    TERM) stop_pid "$pid";;
    KILL) kill -9 "$pid"; local i; for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done;;
  esac
}

# node NAME N ACTION: kill (-9) | stop (TERM) | pause (SIGSTOP) | resume (SIGCONT) | start | pid | port | health (N 0: all)
node_cmd() {
  local name=$1 n=$2 action=$3 pid
  declare -F "${name}_member_start" >/dev/null || die "$name has no members"
  case $action in
    kill) member_signal "$name" "$n" KILL;;
    stop) member_signal "$name" "$n" TERM;;
    pause) pid=$(member_pid "$name" "$n") && kill -STOP "$pid";;
    resume) pid=$(member_pid "$name" "$n") && kill -CONT "$pid";;
    start)
      pid=$(member_pid "$name" "$n" || true)
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return 0; fi
      "${name}_member_start" "$n"
      # Started when its port is taken (a process that just died may still hold it for a moment).
      local i; for i in $(seq 1 100); do [ -n "$(listener_pid "$("${name}_member_port" "$n")")" ] && return 0; sleep 0.1; done
      die "$name member $n did not start (see its log)";;
    pid) member_pid "$name" "$n";;
    port) "${name}_member_port" "$n";;
    health) if [ "$n" = 0 ]; then "${name}_health"; else "${name}_member_health" "$n"; fi;; # 0: the whole cluster
    *) die "node actions: kill stop pause resume start pid port health";;
  esac
}

# --- redis-sentinel: a primary (6480) and its replica (6481), watched by three Sentinels -----------
# (26480-26482, master name `deadbolt`, down after 1 s). Members 1 and 2 are the two data nodes;
# after a failover either may be the primary, and a member started again comes back as a primary
# with no data until the Sentinels make it a replica of the current one.
RSENT_DATA=(6480 6481)
RSENT_SENTINELS=(26480 26481 26482)
rsent_cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}" 2>/dev/null; }
# The port of the primary the Sentinels agree on (the first that answers).
redis-sentinel_primary() { local s; for s in "${RSENT_SENTINELS[@]}"; do rsent_cli "$s" sentinel get-master-addr-by-name deadbolt | sed -n 2p && return 0; done; return 1; }
redis-sentinel_member_port() { echo "${RSENT_DATA[$(($1-1))]}"; }
redis-sentinel_member_health() { redis_ping "${RSENT_DATA[$(($1-1))]}"; }
redis-sentinel_health() {
  local s primary; primary=$(redis-sentinel_primary) || return 1
  [ -n "$primary" ] && rsent_cli "$primary" info replication | grep -q '^role:master' || return 1
  rsent_cli "$primary" info replication | grep -q '^connected_slaves:1' || return 1
  for s in "${RSENT_SENTINELS[@]}"; do rsent_cli "$s" sentinel master deadbolt | grep -A1 '^num-other-sentinels$' | tail -n1 | grep -q '^2$' || return 1; done
  local other; for other in "${RSENT_DATA[@]}"; do
    [ "$other" = "$primary" ] || rsent_cli "$other" info replication | grep -q '^master_link_status:up' || return 1
  done
}
redis-sentinel_install() { redis_install; }
redis-sentinel_member_start() {
  local i=$1 port=${RSENT_DATA[$(($1-1))]} dir="$STATE/redis-sentinel/$1"
  mkdir -p "$dir"
  # The first start: member 2 replicates member 1. Later starts: a member rejoins as a replica of
  # the primary the Sentinels name, as an operator restarts a failed node (left to themselves, the
  # Sentinels convert a returning old primary only at their next 10 s INFO round).
  local args=() primary=''
  if [ ! -f "$dir/started" ]; then [ "$i" = 2 ] && args=(--replicaof 127.0.0.1 "${RSENT_DATA[0]}")
  else primary=$(redis-sentinel_primary || true); [ -n "$primary" ] && [ "$primary" != "$port" ] && args=(--replicaof 127.0.0.1 "$primary"); fi
  redis-server --daemonize no --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" "${args[@]}" \
    >>"$dir/redis.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
  touch "$dir/started"
}
redis-sentinel_start() {
  rm -rf "$STATE"/redis-sentinel/[12] "$STATE"/redis-sentinel/s*
  redis-sentinel_member_start 1
  local i; for i in $(seq 1 50); do redis_ping "${RSENT_DATA[0]}" && break; sleep 0.1; done
  redis-sentinel_member_start 2
  local s; for s in "${RSENT_SENTINELS[@]}"; do
    local dir="$STATE/redis-sentinel/s$s"; mkdir -p "$dir"
    printf '%s\n' "port $s" 'bind 127.0.0.1' "dir $dir" \
      "sentinel monitor deadbolt 127.0.0.1 ${RSENT_DATA[0]} 2" 'sentinel down-after-milliseconds deadbolt 1000' \
      'sentinel failover-timeout deadbolt 3000' 'sentinel parallel-syncs deadbolt 1' > "$dir/sentinel.conf"
    redis-server "$dir/sentinel.conf" --sentinel --daemonize yes --pidfile "$dir/sentinel.pid" --logfile "$dir/sentinel.log"
  done
  cp "$STATE/redis-sentinel/1/member.pid" "$STATE/redis-sentinel/redis-sentinel.pid"
}
redis-sentinel_stop() {
  local p; for p in "${RSENT_SENTINELS[@]}" "${RSENT_DATA[@]}"; do stop_pid "$(listener_pid "$p")"; done
}
redis-sentinel_reusable() {
  [ -f "$STATE/redis-sentinel/owned" ] || return 1
  local n pid; for n in 1 2; do pid=$(cat "$STATE/redis-sentinel/$n/member.pid" 2>/dev/null) && [ "$(listener_pid "${RSENT_DATA[$((n-1))]}")" = "$pid" ] || return 1; done
}
redis-sentinel_version() { redis-sentinel_health && echo "Redis primary + replica + 3 Sentinels ($(redis_version))"; }
