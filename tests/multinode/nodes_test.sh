#!/usr/bin/env bash
# The simulated-node harness itself (nodes.sh): each node has its own hostname, /etc/hosts,
# local directory and address, all see the shared directory, mpirun starts ranks on the
# nodes named, the host's own network and files are untouched, names are unique when
# harnesses run side by side, everything is removed at exit even when the test fails or
# was killed outright, and without root the harness says SKIPPED (a failure where
# STRATA_MULTINODE_REQUIRED=1).
# Usage (from Bazel): nodes_test.sh <nodes.sh>
set -uo pipefail
lib="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$lib"
fail() { echo "FAIL: $*"; exit 1; }

# Without root: SKIPPED and success, or a failure where a skip is not allowed. A user
# namespace without a mapping makes this process "nobody".
out="$(STRATA_MULTINODE_REQUIRED=0 unshare --user bash -c "source '$lib'; nodes_require_root; echo not skipped" 2>&1)"
[ $? -eq 0 ] && [[ "$out" == "SKIPPED: simulated nodes need root"* ]] || fail "non-root: '$out'"
out="$(STRATA_MULTINODE_REQUIRED=1 unshare --user bash -c "source '$lib'; nodes_require_root; echo not skipped" 2>&1)"
[ $? -ne 0 ] && [[ "$out" == *"a skip is a failure here"* ]] || fail "non-root, required: '$out'"
nodes_require_root

host_links="$(ip -o link | awk -F': ' '{print $2}' | sort)"
host_name="$(hostname)"
host_hosts="$(md5sum < /etc/hosts)"

# A namespace left by a harness that was killed outright (its pid is gone) is swept.
dead=4000000   # above any pid this machine hands out (pid_max is 4194304 at most)
while kill -0 "$dead" 2> /dev/null; do dead=$((dead + 1)); done
ip netns add "strata-$dead-1-n0" || fail "ip netns add"

nodes_up 3
ip netns list | grep -q "strata-$dead-1-n0" && fail "the stale namespace was not swept"
for k in 0 1 2; do
  [ "$(on_node "$k" hostname)" = "node$k" ] || fail "node$k's hostname: $(on_node "$k" hostname)"
  [ "$(on_node "$k" ip -4 -o addr show eth0 | awk '{print $4}')" = "10.213.0.$((k + 1))/24" ] \
    || fail "node$k's address"
  on_node "$k" grep -q "^10.213.0.3 node2$" /etc/hosts || fail "node$k's /etc/hosts lacks node2"
  on_node "$k" bash -c "echo $k > '$NODES_LOCAL/mine' && echo $k > '$NODES_SHARED/from$k'"
done
for k in 0 1 2; do
  [ "$(cat "$(nodes_local_dir "$k")/mine")" = "$k" ] || fail "node$k's local directory"
  [ "$(on_node "$k" cat "$NODES_LOCAL/mine")" = "$k" ] || fail "node$k sees another's local dir"
  [ "$(on_node 0 cat "$NODES_SHARED/from$k")" = "$k" ] || fail "node0 does not see node$k's shared file"
done
[ -z "$(ls -A "$NODES_LOCAL")" ] || fail "the common path outside the nodes is not empty"
# Nothing listens on port 1: a refusal proves the route, silence (a timeout) proves its lack.
reach() { on_node "$1" timeout 3 bash -c "exec 3<>/dev/tcp/$2/1" 2>&1; }
[[ "$(reach 0 node1)" == *"Connection refused"* ]] || fail "node0 cannot reach node1 by name"
[[ "$(reach 2 10.213.0.1)" == *"Connection refused"* ]] || fail "node2 cannot reach node0"

# mpirun across the nodes: ranks land where -H says.
placed="$(NODES_TIMEOUT=60 nodes_mpirun node0:1,node1:2,node2:1 -- \
  bash -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname) $OMPI_COMM_WORLD_LOCAL_RANK"' | sort)"
[ "$placed" = "$(printf '0 node0 0\n1 node1 0\n2 node1 1\n3 node2 0')" ] || fail "placement: $placed"

# A cut link isolates the node.
nodes_link 2 down
[[ "$(reach 0 10.213.0.3)" == *"Connection refused"* ]] && fail "node2 answers with its link down"
nodes_link 2 up

# The host is untouched.
[ "$(hostname)" = "$host_name" ] || fail "the host's name changed"
[ "$(md5sum < /etc/hosts)" = "$host_hosts" ] || fail "the host's /etc/hosts changed"
[ "$(ip -o link | awk -F': ' '{print $2}' | sort)" = "$host_links" ] || fail "the host's links changed"

# Harnesses side by side, each failing on purpose: unique names, and nothing left behind.
# The sleepers carry a name of this test's own (argv[0]), so another "sleep 300" on the
# machine is not taken for one of them.
leftover="nodes-test-leftover-$$"
for i in 1 2; do
  bash -c "source '$lib'; nodes_up 2; echo \$NODES_PREFIX \$NODES_DIR > '$NODES_DIR/side$i';
           on_node 1 bash -c 'exec -a $leftover sleep 300' & sleep 1; exit 3" 2> /dev/null &
done
wait
read -r p1 d1 < "$NODES_DIR/side1"
read -r p2 d2 < "$NODES_DIR/side2"
[ "$p1" != "$p2" ] || fail "two harnesses used the same names ($p1)"
for p in "$p1" "$p2"; do
  ip netns list | grep -q "^$p-" && fail "namespaces of $p left behind"
done
[ ! -e "$d1" ] && [ ! -e "$d2" ] || fail "a failed harness left its directory"
pgrep -f "$leftover" > /dev/null && fail "a process of a failed harness still runs"

prefix="$NODES_PREFIX" dir="$NODES_DIR"
nodes_down
ip netns list | grep -q "^$prefix-" && fail "nodes_down left namespaces"
[ ! -e "$dir" ] || fail "nodes_down left $dir"
echo PASS
