#!/usr/bin/env bash
# test-matrix: real servers for every deadbolt backend on one machine, loopback only.
#   lib.sh up [name...] | down [name...] | restart <name> | status [name...] | url <name> | apt <pkg...>
#          | node <name> <n> kill|stop|pause|stutter|resume|start|...   (a cluster's member n, clusters.sh)
# Names: redis mysql postgres zookeeper etcd cassandra redis-cluster redis-replica redis-redlock
# etcd-cluster zookeeper-ensemble redis-sentinel pgbouncer (clusters.sh), and cassandra-cluster,
# started only when named (the long profile). Everything we start keeps its data, logs and pid
# under test-matrix/.state/<name>/. A server already answering is reused and never stopped by
# `down` (only servers `up` started carry the .state/<name>/owned marker).
set -euo pipefail

TM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="$TM_DIR/.state"
ALL=(redis mysql postgres zookeeper etcd cassandra redis-cluster redis-replica redis-redlock etcd-cluster zookeeper-ensemble redis-sentinel pgbouncer)
LONG=(cassandra-cluster) # started only when named; `down` and `status` include them when `up` started them
CASSANDRA_VERSION=5.0.9

log() { printf '[test-matrix] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- helpers -----------------------------------------------------------------------------------

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# apt_install PKG...: install Debian packages once, quietly.
apt_install() {
  local missing=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} (Debian packages)"
  local sudo=''; [ "$(id -u)" = 0 ] || sudo='sudo'
  mkdir -p "$STATE"
  # `up` installs servers in parallel; apt and dpkg take one caller at a time.
  (
    flock 9
    if [ ! -f "$STATE/.apt-updated" ]; then $sudo apt-get update -qq >/dev/null; touch "$STATE/.apt-updated"; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  ) 9>"$STATE/.apt.lock"
}

# wait_healthy NAME SECONDS: poll NAME_health until it succeeds.
wait_healthy() {
  local name=$1 limit=$2 start=$SECONDS
  local pid; pid=$(pid_of "$name" || true)
  until "${name}_health" >/dev/null 2>&1; do
    if (( SECONDS - start >= limit )) || { [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; }; then
      log "$name did not become healthy (waited $((SECONDS - start))s of ${limit}s); log tail:"
      tail -n 40 "$STATE/$name/$name.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.3
  done
}

pid_of() { [ -f "$STATE/$1/$1.pid" ] && cat "$STATE/$1/$1.pid"; }

# pid listening on a loopback TCP port (any owner), or on host:port (where servers share a port
# on different loopback addresses).
listener_pid() {
  local filter="sport = :${1##*:}"; [ "${1%:*}" = "$1" ] || filter+=" and src ${1%:*}"
  ss -Hltnp "$filter" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2
}

stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "pid $pid ignored SIGTERM for 30s; killing"
  kill -9 "$pid" 2>/dev/null || true
}

# daemon NAME CMD...: start CMD detached, logging to .state/NAME/NAME.log, pid in NAME.pid.
daemon() {
  local name=$1; shift
  mkdir -p "$STATE/$name"
  setsid "$@" >>"$STATE/$name/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/$name/$name.pid"
}

# --- redis -------------------------------------------------------------------------------------
REDIS_PORT=6379
redis_health() { [ "$(redis-cli -h 127.0.0.1 -p $REDIS_PORT ping 2>/dev/null)" = PONG ]; }
redis_install() { command -v redis-server >/dev/null || apt_install redis-server; }
redis_start() {
  mkdir -p "$STATE/redis"
  # No persistence, like the machine's own Redis: a restart loses every key (the fault tests rely on it).
  redis-server --daemonize yes --bind 127.0.0.1 --port $REDIS_PORT --save '' --appendonly no \
    --dir "$STATE/redis" --logfile "$STATE/redis/redis.log" --pidfile "$STATE/redis/redis.pid"
}
redis_stop() {
  local pid; pid=$(listener_pid $REDIS_PORT || true)
  redis-cli -h 127.0.0.1 -p $REDIS_PORT shutdown nosave >/dev/null 2>&1 || true
  local i; for i in $(seq 1 100); do { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || port_open $REDIS_PORT || return 0; sleep 0.1; done
  stop_pid "$pid"
}
redis_version() { redis-cli -h 127.0.0.1 -p $REDIS_PORT info server 2>/dev/null | sed -n 's/^redis_version:\(.*\)\r$/Redis \1/p'; }

# redis_node NAME PORT [ARGS...]: one more redis-server on loopback, no persistence, under .state/NAME/PORT.
redis_node() {
  local name=$1 port=$2; shift 2
  local dir="$STATE/$name/$port"
  mkdir -p "$dir"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" "$@"
}
redis_node_stop() {
  local port=$1 pid; pid=$(listener_pid "$port" || true)
  redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
  local i; for i in $(seq 1 100); do port_open "$port" || return 0; sleep 0.1; done
  stop_pid "$pid"
}
redis_ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

# --- redis-cluster: three masters (7101-7103), no replicas, a fresh cluster at every start ----------
RCLUSTER_PORTS=(7101 7102 7103)
redis-cluster_health() {
  local p; for p in "${RCLUSTER_PORTS[@]}"; do
    redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}
redis-cluster_install() { redis_install; }
redis-cluster_start() {
  local p hosts=()
  rm -rf "$STATE"/redis-cluster/71*
  for p in "${RCLUSTER_PORTS[@]}"; do
    redis_node redis-cluster "$p" --cluster-enabled yes --cluster-config-file "$STATE/redis-cluster/$p/nodes.conf" --cluster-node-timeout 5000
    hosts+=("127.0.0.1:$p")
  done
  for p in "${RCLUSTER_PORTS[@]}"; do local i; for i in $(seq 1 100); do redis_ping "$p" && break; sleep 0.1; done; done
  redis-cli --cluster create "${hosts[@]}" --cluster-replicas 0 --cluster-yes >"$STATE/redis-cluster/create.log" 2>&1
  echo "$(listener_pid 7101)" > "$STATE/redis-cluster/redis-cluster.pid"
}
redis-cluster_stop() { local p; for p in "${RCLUSTER_PORTS[@]}"; do redis_node_stop "$p"; done; }
redis-cluster_version() { redis-cluster_health && echo "Redis Cluster, 3 masters ($(redis_version))"; }

# --- redis-replica: a primary (6380) with one replica (6381) -------------------------------------
redis-replica_health() {
  redis_ping 6380 && redis-cli -h 127.0.0.1 -p 6381 info replication 2>/dev/null | grep -q '^master_link_status:up'
}
redis-replica_install() { redis_install; }
redis-replica_start() {
  rm -rf "$STATE"/redis-replica/638*
  redis_node redis-replica 6380
  redis_node redis-replica 6381 --replicaof 127.0.0.1 6380
  echo "$(listener_pid 6380)" > "$STATE/redis-replica/redis-replica.pid" 2>/dev/null || true
}
redis-replica_stop() { redis_node_stop 6381; redis_node_stop 6380; }
redis-replica_version() { redis-replica_health && echo "Redis primary + 1 replica ($(redis_version))"; }

# --- redis-redlock: five independent nodes (6391-6395) for Redlock --------------------------------
# `restart redis-redlock` restarts the first node only, empty: a Redlock deployment losing one node.
RLOCK_PORTS=(6391 6392 6393 6394 6395)
redis-redlock_health() { local p; for p in "${RLOCK_PORTS[@]}"; do redis_ping "$p" || return 1; done; }
redis-redlock_install() { redis_install; }
redis-redlock_start() {
  local p; for p in "${RLOCK_PORTS[@]}"; do redis_ping "$p" || redis_node redis-redlock "$p"; done
  echo "$(listener_pid 6391)" > "$STATE/redis-redlock/redis-redlock.pid" 2>/dev/null || true
}
redis-redlock_stop() { local p; for p in "${RLOCK_PORTS[@]}"; do redis_node_stop "$p"; done; }
redis-redlock_restart() { redis_node_stop 6391; redis_node redis-redlock 6391; }
redis-redlock_version() { redis-redlock_health && echo "5 independent Redis nodes ($(redis_version))"; }

# --- mysql (MariaDB) ---------------------------------------------------------------------------
MYSQL_PORT=3306
mysql_cli() { mariadb --protocol=tcp -h 127.0.0.1 -P $MYSQL_PORT -uroot "$@"; }
mysql_health() { mysql_cli -N -e 'CREATE DATABASE IF NOT EXISTS test; SELECT 1' >/dev/null; }
mysql_install() { command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server; }
mysql_start() {
  local dir="$STATE/mysql"
  mkdir -p "$dir"
  if [ ! -d "$dir/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=root --datadir="$dir/data" --auth-root-authentication-method=normal \
      --skip-test-db >>"$dir/mysql.log" 2>&1
  fi
  daemon mysql /usr/sbin/mariadbd --no-defaults --user=root --datadir="$dir/data" --bind-address=127.0.0.1 \
    --port=$MYSQL_PORT --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" --skip-name-resolve \
    --innodb-buffer-pool-size=128M --max-connections=500
}
mysql_stop() {
  local pid; pid=$(listener_pid $MYSQL_PORT || true)
  mysql_cli -e 'SHUTDOWN' >/dev/null 2>&1 || true
  local i; for i in $(seq 1 150); do { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || port_open $MYSQL_PORT || return 0; sleep 0.2; done
  stop_pid "$pid"
}
# Session modes hold one connection per held lock and per waiter (a suite holds over 100 at once,
# the benchmark's scenario 4 has 200 workers): a reused server that allows fewer than 300, such as a
# distribution's default, is raised to 500. True (and says so) when <name>'s <max> is too few.
too_few_connections() {
  [ "$2" -ge 300 ] && return 1
  log "$1: max_connections $2 is too few for the session-mode suites and benchmark; raising it to 500"
}
# A dynamic setting here: no restart, and not kept across one (restart_one asks again).
mysql_prepare() {
  local max; max=$(mysql_cli -N -e 'SELECT @@max_connections') || return 1
  too_few_connections mysql "$max" || return 0
  mysql_cli -e 'SET GLOBAL max_connections = 500'
}
mysql_version() { mysql_cli -N -e 'SELECT CONCAT("MariaDB/MySQL ", VERSION())' 2>/dev/null; }

# --- postgres ----------------------------------------------------------------------------------
PG_PORT=5432
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }
postgres_cli() { psql -h 127.0.0.1 -p $PG_PORT -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
postgres_health() { postgres_cli -tAc 'SELECT 1' >/dev/null; }
postgres_install() { [ -n "$(pg_bin)" ] && command -v psql >/dev/null || apt_install postgresql postgresql-client; }
postgres_start() {
  local dir="$STATE/postgres" bin as=(); bin=$(pg_bin)
  mkdir -p "$dir"
  # PostgreSQL will not run as root: as root, the server and its data belong to the postgres user
  # Debian's package creates (setpriv execs, so the pid file names the server itself).
  if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; as=(setpriv --reuid=postgres --regid=postgres --init-groups); fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    # Trust for loopback only: the server listens on 127.0.0.1 and nothing else.
    "${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >>"$dir/postgres.log" 2>&1
  fi
  daemon postgres "${as[@]}" "$bin/postgres" -D "$dir/data" -c listen_addresses=127.0.0.1 -p $PG_PORT \
    -c unix_socket_directories="$dir" -c max_connections=500 -c shared_buffers=128MB
}
# Fast shutdown (SIGINT): SIGTERM would wait for every client to disconnect.
postgres_stop() {
  local pid; pid=$(listener_pid $PG_PORT || true)
  [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null || true
  local i; for i in $(seq 1 150); do { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || port_open $PG_PORT || return 0; sleep 0.2; done
  stop_pid "$pid"
}
# The setting needs a restart here (too_few_connections above says why it is raised).
postgres_prepare() {
  local max; max=$(postgres_cli -tAc 'SHOW max_connections') || return 1
  too_few_connections postgres "$max" || return 0
  postgres_cli -c 'ALTER SYSTEM SET max_connections = 500' && restart_one postgres
}
postgres_version() { postgres_cli -tAc "SELECT 'PostgreSQL ' || current_setting('server_version')" 2>/dev/null; }

# --- zookeeper ---------------------------------------------------------------------------------
ZK_PORT=2181
zk_cmd() { exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf '%s' "$1" >&3 && timeout 2 cat <&3; }
zookeeper_health() { zk_cmd srvr 2>/dev/null | grep -q '^Mode: standalone'; }
zookeeper_install() { [ -f /usr/share/java/zookeeper.jar ] || apt_install zookeeper; }
zookeeper_start() {
  local dir="$STATE/zookeeper"
  mkdir -p "$dir/data"
  sed "s#@DATA@#$dir/data#" "$TM_DIR/zookeeper/zoo.cfg" > "$dir/zoo.cfg"
  # zookeeper.jar names its dependencies in its manifest; slf4j-simple prints warnings to the log.
  daemon zookeeper java -Xmx256m -Dzookeeper.admin.enableServer=false -Dzookeeper.4lw.commands.whitelist=srvr,ruok \
    -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg"
}
zookeeper_stop() { stop_pid "$(pid_of zookeeper || listener_pid $ZK_PORT)"; stop_pid "$(listener_pid $ZK_PORT)"; }
zookeeper_version() { zk_cmd srvr 2>/dev/null | sed -n 's/^Zookeeper version: \([^-,]*\).*/ZooKeeper \1/p'; }

# --- etcd --------------------------------------------------------------------------------------
ETCD_PORT=2379
etcd_health() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
etcd_install() { command -v etcd >/dev/null || apt_install etcd-server; command -v curl >/dev/null || apt_install curl; }
etcd_start() {
  local dir="$STATE/etcd"
  mkdir -p "$dir"
  daemon etcd etcd --name deadbolt --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster deadbolt=http://127.0.0.1:2380 --log-level warn
}
etcd_stop() { stop_pid "$(pid_of etcd)"; stop_pid "$(listener_pid $ETCD_PORT)"; }
etcd_version() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/version" | sed -n 's/.*"etcdserver":"\([^"]*\)".*/etcd \1/p'; }

# shellcheck source=clusters.sh
source "$TM_DIR/clusters.sh"

# --- cassandra ---------------------------------------------------------------------------------
CQL_PORT=9042
cassandra_health() { node "$TM_DIR/cql-probe.mjs" 127.0.0.1 $CQL_PORT >/dev/null; }
cassandra_install() {
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  local lib="$STATE/cassandra/lib"
  if [ ! -f "$lib/cassandra-all-$CASSANDRA_VERSION.jar" ]; then
    command -v mvn >/dev/null || apt_install maven
    log "resolving Apache Cassandra $CASSANDRA_VERSION from Maven Central"
    mvn -q -B -f "$TM_DIR/cassandra/pom.xml" dependency:copy-dependencies -Dcassandra.version=$CASSANDRA_VERSION \
      -DincludeScope=runtime -DoutputDirectory="$lib" >"$STATE/cassandra-maven.log" 2>&1 \
      || { tail -n 30 "$STATE/cassandra-maven.log" >&2; die "maven could not resolve cassandra-all"; }
  fi
}
# cassandra_command DIR HEAP [JVM option...]: the command line of a node whose cassandra.yaml,
# data and logs are in DIR (the single node's and each cluster node's).
cassandra_command() {
  local dir=$1 heap=$2; shift 2
  local opts; opts=$(grep -v '^\s*#' "$TM_DIR/cassandra/jvm.options" | grep -v '^\s*$' | tr '\n' ' ')
  # shellcheck disable=SC2086
  echo java $opts "$@" "-Xms$heap" "-Xmx$heap" \
    "-Dcassandra.config=file://$dir/cassandra.yaml" "-Dcassandra.storagedir=$dir/data" \
    "-Dcassandra.logdir=$dir/logs" "-Dlogback.configurationFile=$TM_DIR/cassandra/logback.xml" \
    -Dcassandra-foreground=yes -cp "$STATE/cassandra/lib/*" org.apache.cassandra.service.CassandraDaemon
}
cassandra_start() {
  local dir="$STATE/cassandra"
  mkdir -p "$dir/data" "$dir/logs"
  sed "s#@STATE@#$dir#g" "$TM_DIR/cassandra/cassandra.yaml" > "$dir/cassandra.yaml"
  local cmd; read -ra cmd <<< "$(cassandra_command "$dir" 1g)"
  daemon cassandra "${cmd[@]}"
}
cassandra_stop() { stop_pid "$(pid_of cassandra)"; stop_pid "$(listener_pid $CQL_PORT)"; }
cassandra_version() { node "$TM_DIR/cql-probe.mjs" 127.0.0.1 $CQL_PORT 2>/dev/null | sed 's/^/Cassandra /'; }

# --- commands ----------------------------------------------------------------------------------
fn_name() { [ "$1" = zookeeper ] && echo zookeeper || echo "$1"; }
limit_for() { case $1 in cassandra|cassandra-cluster) echo 240;; mysql|postgres|zookeeper|zookeeper-ensemble|etcd-cluster) echo 90;; *) echo 45;; esac; }

url_of() {
  case $1 in
    redis) echo "${DEADBOLT_REDIS_URL:-redis://127.0.0.1:6379}";;
    mysql) echo "${DEADBOLT_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}";;
    postgres) echo "${DEADBOLT_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}";;
    zookeeper) echo "${DEADBOLT_ZOOKEEPER_URL:-zookeeper://127.0.0.1:2181}";;
    etcd) echo "${DEADBOLT_ETCD_URL:-etcd://127.0.0.1:2379}";;
    cassandra) echo "${DEADBOLT_CASSANDRA_URL:-cassandra://127.0.0.1:9042/deadbolt}";;
    redis-cluster) echo "${DEADBOLT_REDIS_CLUSTER_URL:-redis://127.0.0.1:7101}";;
    redis-replica) echo "${DEADBOLT_REDIS_REPLICA_URL:-redis://127.0.0.1:6380}";;
    redis-redlock) echo "${DEADBOLT_REDIS_REDLOCK_URL:-redis://127.0.0.1:6391}";;
    etcd-cluster) echo "${DEADBOLT_ETCD_CLUSTER_URL:-etcd://127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793}";;
    zookeeper-ensemble) echo "${DEADBOLT_ZOOKEEPER_ENSEMBLE_URL:-zookeeper://127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813}";;
    redis-sentinel) echo "${DEADBOLT_REDIS_SENTINEL_URL:-redis://127.0.0.1:26480,127.0.0.1:26481,127.0.0.1:26482}";; # Sentinels; master name deadbolt
    pgbouncer) echo "${DEADBOLT_PGBOUNCER_URL:-postgres://postgres@127.0.0.1:6432/deadbolt_tx}";; # and /deadbolt_session
    cassandra-cluster) echo "${DEADBOLT_CASSANDRA_CLUSTER_URL:-cassandra://127.0.0.2:9042,127.0.0.3:9042,127.0.0.4:9042/deadbolt}";;
    *) die "unknown server $1 (known: ${ALL[*]})";;
  esac
}

up_one() {
  local name=$1 start=$SECONDS
  # A cluster another checkout started answers, but its members are not ours to kill and restart.
  if declare -F "${name}_reusable" >/dev/null && "${name}_health" >/dev/null 2>&1 && ! "${name}_reusable"; then
    log "$name: answering but started elsewhere; starting it anew"
    "${name}_stop"
  fi
  if "${name}_health" >/dev/null 2>&1; then
    log "$name: already answering, reused ($((SECONDS - start))s)"
    if declare -F "${name}_prepare" >/dev/null; then "${name}_prepare"; fi
    return 0
  fi
  # A cluster left behind half-broken (a run stopped mid-fault: a member paused, killed or cut off)
  # still holds some of its ports: stop whatever answers on them first.
  if declare -F "${name}_reusable" >/dev/null; then "${name}_stop" >/dev/null 2>&1 || true; fi
  "${name}_install"
  "${name}_start"
  touch "$STATE/$name/owned"
  wait_healthy "$name" "$(limit_for "$name")" || return 1
  log "$name: started and healthy in $((SECONDS - start))s"
}

down_one() {
  local name=$1
  if [ -f "$STATE/$name/owned" ]; then "${name}_stop"; rm -f "$STATE/$name/owned" "$STATE/$name/$name.pid"; log "$name: stopped"
  else log "$name: not started by test-matrix, left running"; fi
}

# A server test-matrix did not start is restarted as itself: same command line, same working
# directory (so the same data), not replaced by ours. Redis rewrites its command line and keeps no
# data here, so it is restarted with our own (equivalent) settings.
restart_one() {
  local name=$1 start=$SECONDS port pid cmd=() cwd=/
  if declare -F "${name}_restart" >/dev/null; then
    "${name}_restart"
    wait_healthy "$name" "$(limit_for "$name")" || return 1
    log "$name: restarted in $((SECONDS - start))s"
    return 0
  fi
  port=$(port_of "$name")
  pid=$(listener_pid "$port" || true)
  if [ ! -f "$STATE/$name/owned" ] && [ "${name#redis}" = "$name" ] && [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ]; then
    mapfile -d '' cmd < "/proc/$pid/cmdline"
    cwd=$(readlink "/proc/$pid/cwd" || echo /)
    # As the user it ran as (a PostgreSQL server refuses root).
    local owner; owner=$(stat -c %U "/proc/$pid")
    if [ "$owner" != "$(id -un)" ] && [ "$(id -u)" = 0 ]; then cmd=(setpriv --reuid="$owner" --regid="$owner" --init-groups "${cmd[@]}"); fi
  fi
  "${name}_install"
  "${name}_stop"
  if [ ${#cmd[@]} -gt 0 ]; then
    mkdir -p "$STATE/$name"
    (cd "$cwd" && { setsid "${cmd[@]}" >>"$STATE/$name/$name.log" 2>&1 < /dev/null & echo $! > "$STATE/$name/$name.pid"; })
  else
    "${name}_start"
  fi
  wait_healthy "$name" "$(limit_for "$name")" || return 1
  log "$name: restarted in $((SECONDS - start))s"
  # A setting raised on the running server (mysql's max_connections) is gone after a restart.
  if [ ! -f "$STATE/$name/owned" ] && declare -F "${name}_prepare" >/dev/null; then "${name}_prepare"; fi
}

port_of() { case $1 in cassandra-cluster) echo 127.0.0.2:9042;; pgbouncer) echo 6432;; redis-sentinel) echo 6480;; etcd-cluster) echo 23791;; zookeeper-ensemble) echo 21811;; redis-redlock) echo 6391;; redis-cluster) echo 7101;; redis-replica) echo 6380;; redis) echo $REDIS_PORT;; mysql) echo $MYSQL_PORT;; postgres) echo $PG_PORT;; zookeeper) echo $ZK_PORT;; etcd) echo $ETCD_PORT;; cassandra) echo $CQL_PORT;; esac; }

# DEADBOLT_BACKENDS names backends; each brings the profiles its package's tests use.
profiles_of() { case $1 in redis) echo redis redis-cluster redis-replica redis-redlock;; postgres) echo postgres pgbouncer;; *) echo "$1";; esac; }
names_or_all() {
  if [ $# -gt 0 ]; then echo "$@"
  elif [ -n "${DEADBOLT_BACKENDS:-}" ] && [ "${CI:-}" != true ]; then local b; for b in ${DEADBOLT_BACKENDS//,/ }; do profiles_of "$b"; done | tr '\n' ' '
  else echo "${ALL[@]}"; fi
}
# names_or_all, and with no names the long profiles `up` started.
names_or_started() {
  names_or_all "$@"
  if [ $# -eq 0 ]; then local n; for n in "${LONG[@]}"; do [ -f "$STATE/$n/owned" ] && echo " $n"; done; fi
}

main() {
  local cmd=${1:-status}; shift || true
  mkdir -p "$STATE"
  case $cmd in
    up)
      local failed=() pids=() names; read -ra names <<< "$(names_or_all "$@")"
      for n in "${names[@]}"; do [ "$n" = memory ] && continue; url_of "$n" >/dev/null; up_one "$n" & pids+=($!); done
      local i=0; for n in "${names[@]}"; do [ "$n" = memory ] && continue; wait "${pids[$i]}" || failed+=("$n"); i=$((i+1)); done
      [ ${#failed[@]} -eq 0 ] || die "not healthy: ${failed[*]}";;
    down) local names; read -ra names <<< "$(names_or_started "$@" | tr '\n' ' ')"; for n in "${names[@]}"; do down_one "$n"; done;;
    restart) [ $# -eq 1 ] || die "usage: restart <name>"; url_of "$1" >/dev/null; restart_one "$1";;
    status)
      local names; read -ra names <<< "$(names_or_started "$@" | tr '\n' ' ')"
      for n in "${names[@]}"; do
        if "${n}_health" >/dev/null 2>&1; then printf '%-10s up    %-40s %s\n' "$n" "$(url_of "$n")" "$("${n}_version")"
        else printf '%-10s down  %s\n' "$n" "$(url_of "$n")"; fi
      done;;
    url) url_of "$1";;
    apt) apt_install "$@";; # for tools the tests need besides the servers (scripts/test.sh)
    node) [ $# -eq 3 ] || die "usage: node <name> <n> <action>"; node_cmd "$@";;
    *) die "unknown command $cmd (up, down, restart, status, url, apt, node)";;
  esac
}

main "$@"
