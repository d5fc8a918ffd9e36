#!/usr/bin/env bash
# A local Redis Cluster on 127.0.0.1 for trying kvtier's remote tier and for
# its tests (tests/CMakeLists.txt runs it as ctest fixtures).
#
#   tools/redis-cluster.sh start DIR --port BASE [--masters 3] [--replicas 1]
#                          [--password-file F] [--maxmemory BYTES [--policy P]]
#                          [--node-timeout MS] [--standalone]
#   tools/redis-cluster.sh stop DIR
#   tools/redis-cluster.sh status DIR
#
# start: one redis-server per node on ports BASE, BASE+1, ... (masters x
#   (1 + replicas) of them; the cluster bus is each port + 10000), each with
#   its redis.conf, log, pid and nodes.conf in DIR/PORT/ (DIR is made; a
#   cluster still running from DIR is stopped first). The cluster is created with redis-cli
#   --cluster create, and start returns once every node says cluster_state:ok
#   and all 16384 slots are covered, printing the seed URL on stdout
#   (redis://127.0.0.1:BASE,...: never the password). --standalone starts one
#   non-cluster server instead (cluster-enabled no).
#   --password-file F: F holds "password" or "user password" on one line; the
#   nodes require it (requirepass, or an ACL user) and the replicas use it
#   towards their masters. It goes into the 0600 redis.conf files and
#   DIR/auth (0600, for status), and to redis-cli through REDISCLI_AUTH,
#   never on a command line. Passwords with spaces or quotes are refused.
#   --maxmemory BYTES --policy P: each node evicts at BYTES with P
#   (default allkeys-lru). --node-timeout MS: cluster-node-timeout (default
#   1000, so that a replica takes over a dead master in about 2 s).
# stop: TERM to exactly the pids start wrote (each checked to still be a
#   redis-server started from DIR), KILL to those alive 5 s later. Leaves DIR.
# status: each node's pid, whether it runs, and its cluster_state.
#
# Exit status: 0 done, 1 failed, 2 bad usage, 77 redis-server is not
# installed and CI is not "true" (the tests then skip; in CI that is 1).
# Port 6379 (Debian's system service) is never used or touched.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "redis-cluster.sh: $*" >&2; exit 1; }
bad() { echo "redis-cluster.sh: $*" >&2; exit 2; }

cmd=${1:-}
case "$cmd" in
  start|stop|status) ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
dir=${2:-}
[ -n "$dir" ] || bad "$cmd: the directory is missing"
shift 2

# ------------------------------------------------------------- stop, status
# A pid file's pid, if that process is still a redis-server working in
# this node's directory (redis chdirs to its "dir"; it rewrites its command
# line, so that cannot say): a pid reused by another process is never
# signalled.
node_pid() { # nodedir
  local f=$1/pid pid
  [ -f "$f" ] || return 1
  pid=$(head -c 32 "$f" | tr -dc 0-9)
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = redis-server ] || return 1
  [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$1" ] || return 1
  printf '%s\n' "$pid"
}

node_dirs() { # DIR: the node directories, in port order
  local d
  for d in "$dir"/*/; do
    d=${d%/}
    [[ "$(basename "$d")" =~ ^[0-9]+$ ]] && [ -f "$d/redis.conf" ] && printf '%s\n' "$d"
  done | sort -V
}

cli_env() { # the password, if any, for redis-cli (never argv)
  if [ -f "$dir/auth" ]; then
    local user pass
    read -r user pass <"$dir/auth" || true
    if [ -n "$pass" ]; then export REDISCLI_AUTH=$pass; cli_user=(--user "$user")
    else export REDISCLI_AUTH=$user; cli_user=(); fi
  else
    cli_user=()
  fi
}

if [ "$cmd" = stop ]; then
  [ $# -eq 0 ] || bad "stop takes only the directory"
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  pids=()
  while read -r nd; do
    [ -n "$nd" ] || continue
    if pid=$(node_pid "$nd"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done < <(node_dirs)
  for _ in $(seq 50); do
    alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    [ ${#alive[@]} -eq 0 ] && exit 0
    sleep 0.1
  done
  for pid in "${alive[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  exit 0
fi

if [ "$cmd" = status ]; then
  [ $# -eq 0 ] || bad "status takes only the directory"
  [ -d "$dir" ] || die "no directory $dir"
  dir=$(cd "$dir" && pwd)
  cli_env
  rc=0
  while read -r nd; do
    [ -n "$nd" ] || continue
    port=$(basename "$nd")
    if pid=$(node_pid "$nd"); then
      state=$(redis-cli -h 127.0.0.1 -p "$port" "${cli_user[@]}" --no-auth-warning cluster info 2>/dev/null |
              tr -d '\r' | sed -n 's/^cluster_state://p')
      echo "127.0.0.1:$port pid $pid running ${state:+cluster_state:$state}"
    else
      echo "127.0.0.1:$port not running"; rc=1
    fi
  done < <(node_dirs)
  exit "$rc"
fi

# ------------------------------------------------------------------- start
port="" masters=3 replicas=1 passfile="" maxmem="" policy=allkeys-lru node_timeout=1000 standalone=0
num() { [[ "${2:-}" =~ ^[0-9]+$ ]] || bad "bad value '${2:-}' for $1: expected a number"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --port) num "$1" "${2:-}"; port=$2; shift 2 ;;
    --masters) num "$1" "${2:-}"; masters=$2; shift 2 ;;
    --replicas) num "$1" "${2:-}"; replicas=$2; shift 2 ;;
    --password-file) [ -n "${2:-}" ] || bad "--password-file needs a file"; passfile=$2; shift 2 ;;
    --maxmemory) num "$1" "${2:-}"; maxmem=$2; shift 2 ;;
    --policy) [[ "${2:-}" =~ ^(allkeys|volatile)-(lru|lfu|random)$|^volatile-ttl$|^noeviction$ ]] ||
                bad "bad value '${2:-}' for --policy"; policy=$2; shift 2 ;;
    --node-timeout) num "$1" "${2:-}"; node_timeout=$2; shift 2 ;;
    --standalone) standalone=1; shift ;;
    *) bad "unknown option '$1' (see --help)" ;;
  esac
done
[ -n "$port" ] || bad "start needs --port BASE"
[ "$port" -ne 6379 ] || bad "port 6379 is the system service's"
if [ "$standalone" -eq 1 ]; then masters=1 replicas=0; fi
[ "$standalone" -eq 1 ] || [ "$masters" -ge 3 ] || bad "a cluster needs --masters 3 or more"
n=$((masters * (1 + replicas)))
[ $((port + n - 1)) -le 55535 ] || bad "ports $port..$((port + n - 1)) out of range"

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  if [ "${CI:-}" = true ]; then die "redis-server/redis-cli not installed (apt-get install redis-server redis-tools)"; fi
  echo "redis-cluster.sh: SKIP: redis-server/redis-cli not installed" >&2
  exit 77
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 700 "$dir"
# Servers still running from DIR (a run that was killed before its stop):
# ours, by their pid files, so stopped before anything starts.
"$0" stop "$dir"

user="" pass=""
rm -f "$dir/auth"
if [ -n "$passfile" ]; then
  [ -r "$passfile" ] || die "cannot read the password file $passfile"
  read -r user pass <"$passfile" || true
  if [ -z "$pass" ]; then pass=$user; user=""; fi
  [ -n "$pass" ] || die "the password file $passfile is empty"
  [[ "$pass$user" != *[[:space:]\"\'\\]* ]] || die "the password file holds quotes or backslashes"
  (umask 077; printf '%s %s\n' "${user:-$pass}" "${user:+$pass}" >"$dir/auth")
fi

write_conf() { # nodedir port
  local nd=$1 p=$2
  mkdir -p "$nd"
  rm -f "$nd/nodes.conf" "$nd/dump.rdb"
  (
    umask 077
    {
      echo "bind 127.0.0.1"
      echo "protected-mode yes"
      echo "port $p"
      echo "daemonize no"
      echo "dir $nd"
      echo "logfile $nd/log"
      echo "appendonly no"
      echo 'save ""'
      if [ "$standalone" -eq 0 ]; then
        echo "cluster-enabled yes"
        echo "cluster-config-file $nd/nodes.conf"
        echo "cluster-node-timeout $node_timeout"
        # A cache: the masters that are up keep serving their slots while
        # another one fails over (with "yes" every node refuses every key).
        echo "cluster-require-full-coverage no"
      fi
      if [ -n "$maxmem" ]; then echo "maxmemory $maxmem"; echo "maxmemory-policy $policy"; fi
      if [ -n "$pass" ] && [ -n "$user" ]; then
        echo "user default off"
        echo "user $user on >$pass ~* &* +@all"
        echo "masteruser $user"
        echo "masterauth $pass"
      elif [ -n "$pass" ]; then
        echo "requirepass $pass"
        echo "masterauth $pass"
      fi
    } >"$nd/redis.conf"
  )
}

# A port something else listens on (another cluster, another user's) would
# be answered by that server, and the checks below would take it for ours.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=()
for ((i = 0; i < n; i++)); do
  p=$((port + i)); ports+=("$p")
  ! in_use "$p" || die "127.0.0.1:$p is in use by another process"
  [ "$standalone" -eq 1 ] || ! in_use $((p + 10000)) || die "127.0.0.1:$((p + 10000)) (cluster bus) is in use"
done
for p in "${ports[@]}"; do write_conf "$dir/$p" "$p"; done
for p in "${ports[@]}"; do
  nd=$dir/$p
  # setsid: the server leaves the caller's process group (a ctest fixture
  # outlives its setup step); its pid is $! (setsid execs in place).
  setsid redis-server "$nd/redis.conf" </dev/null >>"$nd/log" 2>&1 &
  echo "$!" >"$nd/pid"
done

cli_env
cli() { redis-cli -h 127.0.0.1 "${cli_user[@]}" --no-auth-warning "$@"; }
wait_for() { # seconds command...: polls every 0.1 s
  local tries=$(($1 * 10)); shift
  for ((t = 0; t < tries; t++)); do "$@" && return 0; sleep 0.1; done
  return 1
}
pong() { # the server on port $1 answers, and is the process we started
  local id
  id=$(cli -p "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
  [ -n "$id" ] && [ "$id" = "$(cat "$dir/$1/pid")" ]
}
for p in "${ports[@]}"; do
  wait_for 10 pong "$p" || { "$0" stop "$dir"; die "127.0.0.1:$p did not start (see $dir/$p/log)"; }
done

seeds=()
for p in "${ports[@]}"; do seeds+=("127.0.0.1:$p"); done
url="redis://$(IFS=,; echo "${seeds[*]}")"
if [ "$standalone" -eq 1 ]; then echo "$url"; exit 0; fi

if ! cli --cluster create "${seeds[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1; then
  "$0" stop "$dir"
  die "redis-cli --cluster create failed (see $dir/create.log)"
fi
cluster_ok() { # every node: state ok, all slots covered, and the replicas known
  local p info
  for p in "${ports[@]}"; do
    info=$(cli -p "$p" cluster info 2>/dev/null | tr -d '\r') || return 1
    grep -qx 'cluster_state:ok' <<<"$info" || return 1
    grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
    grep -qx "cluster_known_nodes:$n" <<<"$info" || return 1
  done
}
replicas_up() { # every replica has synced with its master
  local p
  for p in "${ports[@]}"; do
    if cli -p "$p" info replication 2>/dev/null | tr -d '\r' | grep -qx 'role:slave'; then
      cli -p "$p" info replication 2>/dev/null | tr -d '\r' | grep -qx 'master_link_status:up' || return 1
    fi
  done
}
wait_for 60 cluster_ok || { "$0" stop "$dir"; die "the cluster did not reach cluster_state:ok in 60 s"; }
wait_for 60 replicas_up || { "$0" stop "$dir"; die "the replicas did not sync in 60 s"; }
echo "$url"
