# Simulated nodes for tests (sourced by bash): N network namespaces joined by a bridge that
# lives in a namespace of its own, each node with its own hostname (node0, node1, ...), its
# own /etc/hosts naming them all, its own local directory at one common path ($NODES_LOCAL)
# and a shared directory ($NODES_SHARED) that every node sees. `mpirun` starts remote ranks
# through an rsh agent that enters the node's namespaces. Names are unique per test (tests
# run in parallel) and everything is removed at exit, whether the test passed or not.
# Needs root: without it the test says SKIPPED and exits 0, except where
# STRATA_MULTINODE_REQUIRED=1 (CI, which runs as root), where a skip is a failure.
#
#   source nodes.sh
#   nodes_require_root        # SKIPPED (or FAIL under STRATA_MULTINODE_REQUIRED=1) without root
#   nodes_up 2                # node0 and node1; removed again at exit
#   on_node 1 hostname        # node1
#   nodes_mpirun node0:2,node1:2 -- strata train ...   # mpirun run from node0
#   nodes_link 1 down         # cut node1's link (no netem on these machines)
#   nodes_kill 1 strata       # SIGKILL the first process named strata on node1
#
# Addresses are 10.213.0.K+1/24, used only inside these namespaces: the root namespace's
# links, routes and files are never touched (/etc/hosts is bind-mounted per node, inside a
# private mount namespace).

NODES_SUBNET=10.213.0
NODES_CIDR="$NODES_SUBNET.0/24"

nodes_fail() { echo "FAIL: $*" >&2; exit 1; }

nodes_require_root() {
  local why=""
  if [ "$(id -u)" != 0 ]; then
    why="simulated nodes need root (network namespaces, mounts)"
  elif ! command -v ip > /dev/null || ! command -v unshare > /dev/null; then
    why="simulated nodes need ip (iproute2) and unshare (util-linux)"
  elif ! ip netns add "strata-probe-$$" 2> /dev/null; then
    why="network namespaces are not available here (ip netns add failed)"
  else
    ip netns del "strata-probe-$$"
  fi
  [ -z "$why" ] && return 0
  if [ "${STRATA_MULTINODE_REQUIRED:-0}" = 1 ]; then
    nodes_fail "$why, and STRATA_MULTINODE_REQUIRED=1 (a skip is a failure here)"
  fi
  echo "SKIPPED: $why"
  exit 0
}

# Namespaces left by a test that was killed outright (SIGKILL leaves no trap): the owner's
# pid is in the name; remove those whose owner is gone.
nodes_sweep_stale() {
  local ns pid
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep '^strata-[0-9]*-'); do
    pid="${ns#strata-}"
    pid="${pid%%-*}"
    kill -0 "$pid" 2> /dev/null && continue
    nodes_kill_all "$ns"
    ip netns del "$ns" 2> /dev/null || true
  done
}

nodes_kill_all() {  # every process in namespace $1
  local pids
  pids="$(ip netns pids "$1" 2> /dev/null)"
  [ -n "$pids" ] && kill -9 $pids 2> /dev/null
  return 0
}

nodes_ns() { echo "$NODES_PREFIX-n$1"; }

nodes_up() {
  local n="$1" k ns
  [ "$n" -ge 1 ] && [ "$n" -le 200 ] || nodes_fail "nodes_up: $n nodes (1..200)"
  nodes_sweep_stale
  NODES_N="$n"
  NODES_PREFIX="strata-$$-$RANDOM"
  # Under /tmp, not TEST_TMPDIR: Open MPI's socket paths must stay short.
  NODES_DIR="$(mktemp -d /tmp/strata-nodes.XXXXXX)"
  NODES_LOCAL="$NODES_DIR/local"   # the common path; each node mounts its own dir over it
  NODES_SHARED="$NODES_DIR/shared"
  mkdir -p "$NODES_LOCAL" "$NODES_SHARED"
  trap nodes_down EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  ip netns add "$NODES_PREFIX-br" || nodes_fail "ip netns add $NODES_PREFIX-br"
  ip -n "$NODES_PREFIX-br" link add br0 type bridge || nodes_fail "bridge"
  ip -n "$NODES_PREFIX-br" link set br0 up
  : > "$NODES_DIR/hosts"
  echo "127.0.0.1 localhost" >> "$NODES_DIR/hosts"
  for ((k = 0; k < n; k++)); do
    ns="$(nodes_ns "$k")"
    ip netns add "$ns" || nodes_fail "ip netns add $ns"
    # The veth is made in the bridge's namespace with its peer straight in the node's.
    ip -n "$NODES_PREFIX-br" link add "v$k" type veth peer name eth0 netns "$ns" \
      || nodes_fail "veth for node$k"
    ip -n "$NODES_PREFIX-br" link set "v$k" master br0 up
    ip -n "$ns" addr add "$NODES_SUBNET.$((k + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # A peer that vanishes with data in flight is given up after ~13 s of retransmissions
    # (5 tries) rather than the default 15 (~15 min): without it, mpirun tearing down a job
    # whose node lost its link waits that long on the unacknowledged kill order (keepalives
    # only cover idle connections). Per namespace: the host keeps its setting.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=5
    mkdir -p "$NODES_DIR/node$k"
    echo "$NODES_SUBNET.$((k + 1)) node$k" >> "$NODES_DIR/hosts"
  done
  # A node's command runner, an executable (so that timeout can run it): enters node K's
  # network namespace, gives it its hostname, its /etc/hosts and its local directory.
  cat > "$NODES_DIR/on_node" << EOF
#!/usr/bin/env bash
k="\$1"; shift
exec ip netns exec "$NODES_PREFIX-n\$k" unshare --uts --mount --propagation private \\
  bash -c 'hostname "\$1" && mount --bind "\$2" /etc/hosts && mount --bind "\$3" "\$4" \\
           && shift 4 && exec "\$@"' \\
  _ "node\$k" "$NODES_DIR/hosts" "$NODES_DIR/node\$k" "$NODES_LOCAL" "\$@"
EOF
  # The rsh agent mpirun calls as: agent HOST COMMAND... (COMMAND is shell text).
  NODES_AGENT="$NODES_DIR/agent"
  cat > "$NODES_AGENT" << EOF
#!/usr/bin/env bash
host="\$1"; shift
case "\$host" in
  node[0-9]*) exec "$NODES_DIR/on_node" "\${host#node}" bash -c "\$*" ;;
  *) echo "nodes agent: unknown host \$host" >&2; exit 1 ;;
esac
EOF
  chmod +x "$NODES_AGENT" "$NODES_DIR/on_node"
  export NODES_PREFIX NODES_DIR NODES_LOCAL NODES_SHARED NODES_N NODES_AGENT
  export TMPDIR="$NODES_DIR/tmp"  # Open MPI's session directories: short paths
  mkdir -p "$TMPDIR"
}

# Runs a command as node K: its network namespace, its hostname, its /etc/hosts, its local
# directory at $NODES_LOCAL.
on_node() {
  [ "$1" -ge 0 ] 2> /dev/null && [ "$1" -lt "$NODES_N" ] || nodes_fail "on_node: no node $1"
  "$NODES_DIR/on_node" "$@"
}

# The local directory of node K, as seen from outside the nodes.
nodes_local_dir() { echo "$NODES_DIR/node$1"; }

# mpirun from node0 across HOSTS (Open MPI's -H list, e.g. node0:2,node1:2), over TCP in
# the nodes' subnet, with keepalives so that a cut link ends the job within seconds
# (without them mpirun waits 11+ minutes); killed after $NODES_TIMEOUT seconds (300).
nodes_mpirun() {
  local hosts="$1"
  shift
  [ "${1:-}" = "--" ] && shift
  timeout -k 5 "${NODES_TIMEOUT:-300}" "$NODES_DIR/on_node" 0 \
    mpirun --allow-run-as-root --oversubscribe -H "$hosts" --mca plm_rsh_agent "$NODES_AGENT" \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$NODES_CIDR" \
    --mca oob_tcp_if_include "$NODES_CIDR" \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 \
    --mca oob_tcp_keepalive_probes 3 "$@"
}

nodes_link() {  # nodes_link K up|down: node K's only link
  ip -n "$(nodes_ns "$1")" link set eth0 "$2"
}

nodes_kill() {  # nodes_kill K NAME: SIGKILL the lowest-pid process named NAME on node K
  local pid comm
  for pid in $(ip netns pids "$(nodes_ns "$1")" | sort -n); do
    comm="$(cat "/proc/$pid/comm" 2> /dev/null)"
    if [ "$comm" = "$2" ]; then
      kill -9 "$pid"
      echo "$pid"
      return 0
    fi
  done
  return 1
}

nodes_down() {
  local k
  [ -n "${NODES_PREFIX:-}" ] || return 0
  for ((k = 0; k < NODES_N; k++)); do
    nodes_kill_all "$(nodes_ns "$k")"
  done
  for ((k = 0; k < NODES_N; k++)); do
    ip netns del "$(nodes_ns "$k")" 2> /dev/null
  done
  ip netns del "$NODES_PREFIX-br" 2> /dev/null
  rm -rf "$NODES_DIR"
  NODES_PREFIX=""
  return 0
}
