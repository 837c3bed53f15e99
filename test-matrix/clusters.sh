# Cluster profiles, sourced by lib.sh: stores of three members on loopback (and PgBouncer in front
# of PostgreSQL), each member a process
# of its own under .state/<name>/<n>/ with its own pid and log, so a fault run can kill, pause and
# restart one member (`lib.sh node <name> <n> kill|pause|resume|start|stop|pid`), start it with no
# data (`start-empty`), cut it off from the other members (`partition`, `heal`) or hand the lead to
# it (`elect`). A fresh cluster at every `up`; a member's `start` keeps its data (a restarted member
# rejoins).

# --- links between members ---------------------------------------------------------------------
# Every member talks from 127.0.0.1, so addresses cannot tell members apart on loopback. As root,
# each member runs as a user of its own (deadbolt-m<n>). A partition of member N adds iptables rules
# on loopback output for as long as it lasts: a packet member N sends to another member's ports, or
# another member sends to N's, marks its connection (by the sender's uid and the port it dials),
# and every packet of a marked connection is dropped, both ways, on the open connections and new
# ones. The member stops hearing its peers without a reset, while clients (another uid) still
# reach it. Outside a partition no rule exists: while any does, the kernel filters and tracks every
# loopback packet of the machine (measured: it slowed the whole test command).
CUT_CHAIN=DEADBOLT-CUT
MARK_CHAIN=DEADBOLT-MARK
cluster_id() { case $1 in etcd-cluster) echo 1;; zookeeper-ensemble) echo 2;; redis-sentinel) echo 3;; pgbouncer) echo 4;; cassandra-cluster) echo 5;; esac; }
# The mark of the connections between member $2 of cluster $1 and the others.
link_mark() { printf '0xdb%d%d' "$(cluster_id "$1")" "$2"; }
member_user() { echo "deadbolt-m$1"; }
as_root() { [ "$(id -u)" = 0 ]; }
member_user_add() { id -u "$(member_user "$1")" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$(member_user "$1")"; }
# as_member N DIR: sets AS, the command prefix that runs a program as member N's user owning DIR
# (as root; as anyone else, AS is empty and members run as the caller).
as_member() {
  AS=()
  as_root || return 0
  local user; user=$(member_user "$1")
  member_user_add "$1"
  chown -R "$user:" "$2"
  AS=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups)
}
ipt() { iptables -w "$@"; }
# links_prepare NAME: what a partition of NAME's members will need (before they start): a user per
# member, and iptables.
links_prepare() {
  as_root || return 0
  command -v iptables >/dev/null || apt_install iptables
  local i; for i in $("${1}_uids"); do member_user_add "$i"; done
  links_heal_all "$1"
}
# links_rules NAME N: the mark rules of a partition of member N, one per line: `<uid> <port>` or
# `<uid> <ip>:<port>` (where members share a port on different addresses).
links_rules() {
  local name=$1 n=$2 j p
  for j in $("${name}_uids"); do
    [ "$j" = "$n" ] && continue
    for p in $("${name}_peer_ports" "$j"); do echo "$(member_user "$n") $p"; done
    for p in $("${name}_peer_ports" "$n"); do echo "$(member_user "$j") $p"; done
  done
}
# links_cut NAME N add|del: drop (or stop dropping) the connections between member N and the others.
# The chains are the machine's, shared by every cluster and checkout: the clusters' runs go side by
# side, and one heal removing the emptied chains between another's creating them and adding its rule
# failed that partition ("No chain/target/match"). So each change holds a lock on the machine.
links_cut() {
  local fd
  exec {fd}>>/tmp/deadbolt-test-matrix-links.lock
  flock "$fd"
  links_cut_locked "$@"
  exec {fd}>&-
}
links_cut_locked() {
  local name=$1 n=$2 op=$3 mark user p
  as_root || die "partitions need root (iptables, and a user per member)"
  mark=$(link_mark "$name" "$n")
  if [ "$op" = add ]; then
    ipt -t mangle -N $MARK_CHAIN 2>/dev/null || true
    ipt -N $CUT_CHAIN 2>/dev/null || true
  fi
  while read -r user p; do
    local to=(--dport "${p##*:}"); [ "${p%:*}" = "$p" ] || to=(-d "${p%:*}" --dport "${p##*:}")
    local rule=(-p tcp "${to[@]}" -m owner --uid-owner "$user" -j CONNMARK --set-mark "$mark")
    if [ "$op" = add ]; then ipt -t mangle -C $MARK_CHAIN "${rule[@]}" 2>/dev/null || ipt -t mangle -A $MARK_CHAIN "${rule[@]}"
    else while ipt -t mangle -D $MARK_CHAIN "${rule[@]}" 2>/dev/null; do :; done; fi
  done < <(links_rules "$name" "$n")
  if [ "$op" = add ]; then
    ipt -C $CUT_CHAIN -m connmark --mark "$mark" -j DROP 2>/dev/null || ipt -A $CUT_CHAIN -m connmark --mark "$mark" -j DROP
    ipt -t mangle -C OUTPUT -o lo -j $MARK_CHAIN 2>/dev/null || ipt -t mangle -A OUTPUT -o lo -j $MARK_CHAIN
    ipt -C OUTPUT -o lo -j $CUT_CHAIN 2>/dev/null || ipt -A OUTPUT -o lo -j $CUT_CHAIN
    return
  fi
  while ipt -D $CUT_CHAIN -m connmark --mark "$mark" -j DROP 2>/dev/null; do :; done
  # The last partition healed: no rule, no hook (see above).
  if [ "$(ipt -S $CUT_CHAIN 2>/dev/null | wc -l)" -le 1 ] && [ "$(ipt -t mangle -S $MARK_CHAIN 2>/dev/null | wc -l)" -le 1 ]; then
    while ipt -D OUTPUT -o lo -j $CUT_CHAIN 2>/dev/null; do :; done
    while ipt -t mangle -D OUTPUT -o lo -j $MARK_CHAIN 2>/dev/null; do :; done
    ipt -X $CUT_CHAIN 2>/dev/null || true
    ipt -t mangle -X $MARK_CHAIN 2>/dev/null || true
  fi
}
links_heal_all() { as_root && command -v iptables >/dev/null || return 0; local n; for n in $("${1}_uids"); do links_cut "$1" "$n" del; done; }
# Whether member N runs as its own user (as root): only then can its links be cut.
member_owner_ok() { ! as_root || [ "$(stat -c %U "/proc/$2" 2>/dev/null)" = "$(member_user "$1")" ]; }

# --- etcd-cluster: three members, clients on 23791-23793, peers on 23801-23803 -----------------
ETCDC_CLIENT=(23791 23792 23793)
ETCDC_PEER=(23801 23802 23803)
etcdc_initial() { local i s=''; for i in 1 2 3; do s+="${s:+,}m$i=http://127.0.0.1:${ETCDC_PEER[$((i-1))]}"; done; echo "$s"; }
etcd-cluster_member_health() { curl -sf --max-time 2 "http://127.0.0.1:${ETCDC_CLIENT[$(($1-1))]}/health" | grep -q '"health":"true"'; }
etcd-cluster_health() { local i; for i in 1 2 3; do etcd-cluster_member_health "$i" || return 1; done; }
etcd-cluster_install() { etcd_install; }
etcd-cluster_uids() { echo 1 2 3; }
etcd-cluster_peer_ports() { echo "${ETCDC_PEER[$(($1-1))]}"; }
etcd-cluster_member_start() {
  local i=$1 dir="$STATE/etcd-cluster/$1" state=existing
  mkdir -p "$dir"
  [ -d "$dir/data/member" ] || state=new
  as_member "$i" "$dir"
  setsid "${AS[@]}" etcd --name "m$i" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:${ETCDC_CLIENT[$((i-1))]}" --advertise-client-urls "http://127.0.0.1:${ETCDC_CLIENT[$((i-1))]}" \
    --listen-peer-urls "http://127.0.0.1:${ETCDC_PEER[$((i-1))]}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCDC_PEER[$((i-1))]}" \
    --initial-cluster "$(etcdc_initial)" --initial-cluster-state "$state" --initial-cluster-token deadbolt-cluster \
    --log-level warn >>"$dir/etcd.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
}
etcd-cluster_start() {
  rm -rf "$STATE"/etcd-cluster/[123]
  links_prepare etcd-cluster
  local i; for i in 1 2 3; do etcd-cluster_member_start "$i"; done
  cp "$STATE/etcd-cluster/1/member.pid" "$STATE/etcd-cluster/etcd-cluster.pid"
}
etcd-cluster_member_port() { echo "${ETCDC_CLIENT[$(($1-1))]}"; }
# An etcd member's data is its identity in the cluster: one started empty must be removed and added
# again (etcdctl member remove/add), which is an operator's procedure, not a fault.
etcd-cluster_member_wipe() { die "etcd-cluster: a member cannot restart empty (it must be removed and added again)"; }
etcdc_post() { curl -sf --max-time 2 -X POST "http://127.0.0.1:${ETCDC_CLIENT[$(($1-1))]}$2" -d "$3"; }
etcdc_field() { sed -n "s/.*\"$1\":\"\([0-9]*\)\".*/\1/p"; }
# Hand the lead to member N (etcd's move-leader, sent to the leader).
etcd-cluster_elect() {
  local target i status id
  target=$(etcdc_post "$1" /v3/maintenance/status '{}' | etcdc_field member_id)
  [ -n "$target" ] || die "etcd-cluster: member $1 does not answer"
  for i in 1 2 3; do
    status=$(etcdc_post "$i" /v3/maintenance/status '{}') || continue
    id=$(etcdc_field member_id <<<"$status")
    [ -n "$id" ] && [ "$id" = "$(etcdc_field leader <<<"$status")" ] || continue
    [ "$id" = "$target" ] && return 0
    etcdc_post "$i" /v3/maintenance/transfer-leadership "{\"targetID\":\"$target\"}" >/dev/null && return 0
    die "etcd-cluster: the leader refused to hand the lead to member $1"
  done
  die "etcd-cluster: no member leads"
}
etcd-cluster_stop() { local i; for i in 1 2 3; do member_signal etcd-cluster "$i" TERM; stop_pid "$(listener_pid "${ETCDC_CLIENT[$((i-1))]}")"; done; }
etcd-cluster_version() { etcd-cluster_health && echo "etcd cluster of 3 ($(curl -sf --max-time 2 "http://127.0.0.1:${ETCDC_CLIENT[0]}/version" | sed -n 's/.*"etcdserver":"\([^"]*\)".*/etcd \1/p'))"; }

# --- zookeeper-ensemble: three servers, clients on 21811-21813, quorum 28881-3, election 38881-3 ----
ZKE_CLIENT=(21811 21812 21813)
zke_cmd() { exec 3<>"/dev/tcp/127.0.0.1/$1" && printf '%s' "$2" >&3 && timeout 2 cat <&3; }
zookeeper-ensemble_member_health() { zke_cmd "${ZKE_CLIENT[$(($1-1))]}" srvr 2>/dev/null | grep -qE '^Mode: (leader|follower)'; }
zookeeper-ensemble_health() { local i; for i in 1 2 3; do zookeeper-ensemble_member_health "$i" || return 1; done; }
zookeeper-ensemble_install() { zookeeper_install; }
zookeeper-ensemble_uids() { echo 1 2 3; }
zookeeper-ensemble_peer_ports() { echo $((28880 + $1)) $((38880 + $1)); }
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
  as_member "$i" "$dir"
  setsid "${AS[@]}" java -Xmx192m -Dzookeeper.admin.enableServer=false -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >>"$dir/zookeeper.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
}
zookeeper-ensemble_start() {
  rm -rf "$STATE"/zookeeper-ensemble/[123]
  links_prepare zookeeper-ensemble
  local i; for i in 1 2 3; do zookeeper-ensemble_member_start "$i"; done
  cp "$STATE/zookeeper-ensemble/1/member.pid" "$STATE/zookeeper-ensemble/zookeeper-ensemble.pid"
}
zookeeper-ensemble_member_port() { echo "${ZKE_CLIENT[$(($1-1))]}"; }
# Started empty, a server keeps only its id and catches up from the leader.
zookeeper-ensemble_member_wipe() { rm -rf "$STATE/zookeeper-ensemble/$1/data/version-2"; }
zookeeper-ensemble_elect() { die "zookeeper-ensemble: ZooKeeper cannot hand its lead over; restart the leader instead"; }
zookeeper-ensemble_stop() { local i; for i in 1 2 3; do member_signal zookeeper-ensemble "$i" TERM; stop_pid "$(listener_pid "${ZKE_CLIENT[$((i-1))]}")"; done; }
zookeeper-ensemble_version() { zookeeper-ensemble_health && echo "ZooKeeper ensemble of 3 ($(zke_cmd "${ZKE_CLIENT[0]}" srvr 2>/dev/null | sed -n 's/^Zookeeper version: \([^-,]*\).*/ZooKeeper \1/p'))"; }

# --- members -----------------------------------------------------------------------------------
# A member's client address, host:port: on 127.0.0.1 unless its cluster says otherwise.
member_address() {
  if declare -F "${1}_member_address" >/dev/null; then "${1}_member_address" "$2"; else echo "127.0.0.1:$("${1}_member_port" "$2")"; fi
}
# A member's pid: whoever listens on its port (a pid file goes stale when a member dies on its
# own or was started twice), else the one recorded when it was started (a paused member still listens).
member_pid() {
  local pid; pid=$(listener_pid "$(member_address "$1" "$2")")
  if [ -n "$pid" ]; then
    [ -d "$STATE/$1/$2" ] && echo "$pid" > "$STATE/$1/$2/member.pid" # not for a cluster another checkout started
    echo "$pid"
  else cat "$STATE/$1/$2/member.pid" 2>/dev/null; fi
}

# Whether this checkout started the cluster that answers: every member's pid is one of ours.
# cluster_reusable NAME [MEMBER...]: members 1 2 3 unless named.
cluster_reusable() {
  local name=$1; shift
  [ -f "$STATE/$name/owned" ] || return 1
  local members=("$@") n pid; [ $# -gt 0 ] || members=(1 2 3)
  for n in "${members[@]}"; do
    pid=$(cat "$STATE/$name/$n/member.pid" 2>/dev/null) && [ "$(listener_pid "$(member_address "$name" "$n")")" = "$pid" ] || return 1
    member_owner_ok "$n" "$pid" || return 1
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

# A member that stutters is stopped (SIGSTOP) 300 ms of every 400 until it is resumed: every
# message it sends or answers, to its peers and to clients, comes up to 300 ms late, as from a
# member in a storm of garbage-collection pauses or on an overloaded host, while its connections
# stay open and it never falls silent for as long as a peer's timeout. A loop of our own, stopped
# (and the member left running) by `resume`.
stutter_start() {
  local pid; pid=$(member_pid "$1" "$2") || die "$1 member $2 is not running"
  stutter_end "$1" "$2"
  setsid bash -c "while kill -STOP $pid 2>/dev/null; do sleep 0.3; kill -CONT $pid; sleep 0.1; done" </dev/null >/dev/null 2>&1 &
  echo $! > "$STATE/$1/$2/stutter.pid"
}
stutter_end() {
  local loop; loop=$(cat "$STATE/$1/$2/stutter.pid" 2>/dev/null) || return 0
  kill "$loop" 2>/dev/null || true
  rm -f "$STATE/$1/$2/stutter.pid"
}

# node NAME N ACTION: kill (-9) | stop (TERM) | pause (SIGSTOP) | stutter | resume (SIGCONT) | start |
# start-empty (a stopped member, its data gone) | partition | heal (its links to the other members)
# | elect (hand it the lead) | pid | port | address (host:port) | health (N 0: the whole cluster)
node_cmd() {
  local name=$1 n=$2 action=$3 pid
  declare -F "${name}_member_start" >/dev/null || die "$name has no members"
  case $action in
    kill) member_signal "$name" "$n" KILL;;
    stop) member_signal "$name" "$n" TERM;;
    pause) pid=$(member_pid "$name" "$n") && kill -STOP "$pid";;
    resume) stutter_end "$name" "$n"; pid=$(member_pid "$name" "$n") && kill -CONT "$pid";;
    stutter) stutter_start "$name" "$n";;
    start)
      pid=$(member_pid "$name" "$n" || true)
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return 0; fi
      "${name}_member_start" "$n"
      # Started when its port is taken (a process that just died may still hold it for a moment;
      # a Cassandra node opens it last, after a start of a minute or more).
      local i; for i in $(seq 1 $((10 * $(limit_for "$name")))); do [ -n "$(listener_pid "$(member_address "$name" "$n")")" ] && return 0; sleep 0.1; done
      die "$name member $n did not start (see its log)";;
    start-empty)
      pid=$(member_pid "$name" "$n" || true)
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then die "$name member $n is running; stop or kill it first"; fi
      "${name}_member_wipe" "$n"
      node_cmd "$name" "$n" start;;
    partition) links_cut "$name" "$n" add;;
    heal) links_cut "$name" "$n" del;;
    elect) "${name}_elect" "$n";;
    pid) member_pid "$name" "$n";;
    port) "${name}_member_port" "$n";;
    address) member_address "$name" "$n";;
    health) if [ "$n" = 0 ]; then "${name}_health"; else "${name}_member_health" "$n"; fi;; # 0: the whole cluster
    *) die "node actions: kill stop pause stutter resume start start-empty partition heal elect pid port address health";;
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
# Users: the data nodes 1 and 2, and 3 for the three Sentinels (cut off together or not at all).
redis-sentinel_uids() { echo 1 2 3; }
redis-sentinel_peer_ports() { if [ "$1" = 3 ]; then echo "${RSENT_SENTINELS[@]}"; else redis-sentinel_member_port "$1"; fi; }
# Nothing to wipe: the data nodes keep nothing on disk, so every start is an empty one.
redis-sentinel_member_wipe() { :; }
# A failover the Sentinels run at once (the replica, member N, promoted).
redis-sentinel_elect() {
  [ "$(redis-sentinel_primary)" = "$(redis-sentinel_member_port "$1")" ] && return 0
  [ "$(rsent_cli "${RSENT_SENTINELS[0]}" sentinel failover deadbolt)" = OK ] || die "redis-sentinel: the Sentinels refused a failover"
}
redis-sentinel_member_start() {
  local i=$1 port=${RSENT_DATA[$(($1-1))]} dir="$STATE/redis-sentinel/$1"
  mkdir -p "$dir"
  # The first start: member 2 replicates member 1. Later starts: a member rejoins as a replica of
  # the primary the Sentinels name, as an operator restarts a failed node (left to themselves, the
  # Sentinels convert a returning old primary only at their next 10 s INFO round).
  local args=() primary=''
  if [ ! -f "$dir/started" ]; then [ "$i" = 2 ] && args=(--replicaof 127.0.0.1 "${RSENT_DATA[0]}")
  else primary=$(redis-sentinel_primary || true); [ -n "$primary" ] && [ "$primary" != "$port" ] && args=(--replicaof 127.0.0.1 "$primary"); fi
  as_member "$i" "$dir"
  setsid "${AS[@]}" redis-server --daemonize no --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" "${args[@]}" \
    >>"$dir/redis.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
  touch "$dir/started"
}
redis-sentinel_start() {
  rm -rf "$STATE"/redis-sentinel/[12] "$STATE"/redis-sentinel/s*
  links_prepare redis-sentinel
  redis-sentinel_member_start 1
  local i; for i in $(seq 1 50); do redis_ping "${RSENT_DATA[0]}" && break; sleep 0.1; done
  redis-sentinel_member_start 2
  local s; for s in "${RSENT_SENTINELS[@]}"; do
    local dir="$STATE/redis-sentinel/s$s"; mkdir -p "$dir"
    printf '%s\n' "port $s" 'bind 127.0.0.1' "dir $dir" \
      "sentinel monitor deadbolt 127.0.0.1 ${RSENT_DATA[0]} 2" 'sentinel down-after-milliseconds deadbolt 1000' \
      'sentinel failover-timeout deadbolt 3000' 'sentinel parallel-syncs deadbolt 1' > "$dir/sentinel.conf"
    as_member 3 "$dir"
    "${AS[@]}" redis-server "$dir/sentinel.conf" --sentinel --daemonize yes --pidfile "$dir/sentinel.pid" --logfile "$dir/sentinel.log"
  done
  cp "$STATE/redis-sentinel/1/member.pid" "$STATE/redis-sentinel/redis-sentinel.pid"
}
redis-sentinel_stop() {
  local p; for p in "${RSENT_SENTINELS[@]}" "${RSENT_DATA[@]}"; do stop_pid "$(listener_pid "$p")"; done
}
redis-sentinel_reusable() { cluster_reusable redis-sentinel 1 2; }
redis-sentinel_version() { redis-sentinel_health && echo "Redis primary + replica + 3 Sentinels ($(redis_version))"; }

# --- pgbouncer: PgBouncer (6432) in front of the postgres profile's server -------------------------
# Two databases of one PgBouncer, both PostgreSQL's `postgres`: deadbolt_tx pools by transaction
# (a client's statements run on whichever server session is free), deadbolt_session by session (a
# client keeps one server session until it disconnects). Member 1 is PgBouncer; "member" 2 stands
# for the PostgreSQL server only so that `partition 1` can cut PgBouncer off from it.
PGB_PORT=6432
pgb_cli() { psql -h 127.0.0.1 -p $PGB_PORT -U postgres -X -q -tA -d "$1" -c "$2"; }
pgbouncer_member_port() { echo $PGB_PORT; }
pgbouncer_member_health() { [ "$(pgb_cli deadbolt_tx 'SELECT 1' 2>/dev/null)" = 1 ] && [ "$(pgb_cli deadbolt_session 'SELECT 1' 2>/dev/null)" = 1 ]; }
pgbouncer_health() { pgbouncer_member_health 1; }
pgbouncer_install() { command -v pgbouncer >/dev/null || apt_install pgbouncer; postgres_install; }
pgbouncer_uids() { echo 1 2; }
pgbouncer_peer_ports() { if [ "$1" = 2 ]; then echo $PG_PORT; else echo $PGB_PORT; fi; }
pgbouncer_member_wipe() { :; } # it keeps nothing
pgbouncer_elect() { die "pgbouncer: one PgBouncer, nothing to elect"; }
pgbouncer_member_start() {
  local dir="$STATE/pgbouncer/1" db="host=127.0.0.1 port=$PG_PORT dbname=postgres user=postgres"
  mkdir -p "$dir"
  # auth_type any: PgBouncer logs in as the database entry's user (PostgreSQL trusts loopback here).
  # Session pooling holds a server session per client, so its pool is as large as the suites need.
  # After a failed server login (PostgreSQL restarting) PgBouncer turns every client away for
  # server_login_retry, 15 s by default: 1 s here, as the restart tests expect of a store.
  printf '%s\n' '[databases]' "deadbolt_tx = $db pool_mode=transaction" "deadbolt_session = $db pool_mode=session pool_size=200" \
    '[pgbouncer]' 'listen_addr = 127.0.0.1' "listen_port = $PGB_PORT" 'unix_socket_dir =' 'auth_type = any' \
    'pool_mode = transaction' 'default_pool_size = 20' 'max_client_conn = 2000' 'max_db_connections = 300' \
    'server_reset_query = DISCARD ALL' 'ignore_startup_parameters = extra_float_digits,options' 'admin_users = postgres' \
    'server_login_retry = 1' \
    "logfile = $dir/pgbouncer.log" > "$dir/pgbouncer.ini"
  # PgBouncer will not run as root: as root it runs as member 1's user, as every member does.
  as_member 1 "$dir"
  setsid "${AS[@]}" pgbouncer "$dir/pgbouncer.ini" >>"$dir/stdout.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
}
pgbouncer_start() {
  rm -rf "$STATE/pgbouncer/1"
  links_prepare pgbouncer
  pgbouncer_member_start 1
  cp "$STATE/pgbouncer/1/member.pid" "$STATE/pgbouncer/pgbouncer.pid"
}
pgbouncer_stop() { member_signal pgbouncer 1 TERM; stop_pid "$(listener_pid $PGB_PORT)"; }
pgbouncer_reusable() { cluster_reusable pgbouncer 1; }
pgbouncer_version() { pgbouncer_health && echo "$(pgbouncer --version | head -n1) in front of $(postgres_version)"; }

# --- cassandra-cluster: three nodes at 127.0.0.2-4 (CQL 9042, storage 7000 on each address) -------
# One token each (the ring in thirds), member 1 the seed. Not in ALL: three JVMs starting on two
# cores take minutes and load the machine for everything else, so `pnpm test:long` runs it
# (keyspaces at replication factor 3). Small heaps (512 MiB each).
CASSC_TOKENS=(-9223372036854775808 -3074457345618258603 3074457345618258602)
cassc_host() { echo "127.0.0.$(($1 + 1))"; }
cassc_probe() { node "$TM_DIR/cql-probe.mjs" "$(cassc_host "$1")" $CQL_PORT "${@:2}"; }
cassandra-cluster_member_port() { echo $CQL_PORT; }
cassandra-cluster_member_address() { echo "$(cassc_host "$1"):$CQL_PORT"; }
cassandra-cluster_member_health() { cassc_probe "$1" >/dev/null 2>&1; }
# Whole: a read at consistency ALL of system_distributed (replicated 3 times: on every node here)
# answers, so every node is up and each sees the others (a node another thinks down fails it).
cassandra-cluster_health() {
  local i; for i in 1 2 3; do cassc_probe "$i" 'SELECT * FROM system_distributed.repair_history LIMIT 1' 5 >/dev/null 2>&1 || return 1; done
}
cassandra-cluster_install() { cassandra_install; }
cassandra-cluster_uids() { echo 1 2 3; }
cassandra-cluster_peer_ports() { echo "$(cassc_host "$1"):7000"; }
# A node wiped in place would claim its token with no data: Cassandra's way back is a new node
# that replaces it (replace_address) and streams its ranges, an operator's procedure, not a fault.
cassandra-cluster_member_wipe() { die "cassandra-cluster: a node cannot restart empty (it must be replaced and stream its data)"; }
cassandra-cluster_elect() { die "cassandra-cluster: Cassandra has no leader"; }
cassandra-cluster_member_start() {
  local i=$1 dir="$STATE/cassandra-cluster/$1" host; host=$(cassc_host "$1")
  mkdir -p "$dir/data" "$dir/logs"
  sed -e "s#@STATE@#$dir#g" -e "s#^cluster_name:.*#cluster_name: deadbolt-cluster#" \
    -e "s#^initial_token:.*#initial_token: ${CASSC_TOKENS[$((i-1))]}#" \
    -e "s#^listen_address:.*#listen_address: $host#" -e "s#^rpc_address:.*#rpc_address: $host#" \
    -e "s#seeds: .*#seeds: \"$(cassc_host 1):7000\"#" "$TM_DIR/cassandra/cassandra.yaml" > "$dir/cassandra.yaml"
  echo 'auto_bootstrap: false' >> "$dir/cassandra.yaml" # each owns its token from the first start
  # The yaml's token wins over jvm.options' single-node one (a later -D overrides an earlier).
  local cmd; read -ra cmd <<< "$(cassandra_command "$dir" 512m "-Dcassandra.initial_token=${CASSC_TOKENS[$((i-1))]}")"
  as_member "$i" "$dir"
  setsid "${AS[@]}" "${cmd[@]}" >>"$dir/cassandra.log" 2>&1 </dev/null &
  echo $! > "$dir/member.pid"
}
cassandra-cluster_start() {
  rm -rf "$STATE"/cassandra-cluster/[123]
  links_prepare cassandra-cluster
  # The seed first: the others learn the ring from it.
  cassandra-cluster_member_start 1
  local i; for i in $(seq 1 600); do cassandra-cluster_member_health 1 && break; sleep 0.5; done
  cassandra-cluster_member_start 2
  cassandra-cluster_member_start 3
  cp "$STATE/cassandra-cluster/1/member.pid" "$STATE/cassandra-cluster/cassandra-cluster.pid"
}
cassandra-cluster_stop() { local i; for i in 1 2 3; do member_signal cassandra-cluster "$i" TERM; stop_pid "$(listener_pid "$(cassandra-cluster_member_address "$i")")"; done; }
cassandra-cluster_reusable() { cluster_reusable cassandra-cluster; }
cassandra-cluster_version() { cassandra-cluster_health && echo "Cassandra cluster of 3 (Cassandra $(cassc_probe 1))"; }
