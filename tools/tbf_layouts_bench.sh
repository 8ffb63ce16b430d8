#!/usr/bin/env bash
# Runs collectives/mpi_layouts_bench (flat, hierarchical and hybrid collectives of one unit,
# by bytes and time) across two simulated nodes whose links are rate-limited: two network
# namespaces (each its own host name, so Open MPI sees two nodes and uses TCP between them
# and shared memory within each), joined by a bridge in a third namespace, with `tc tbf`
# on each node's link (egress). The root namespace's links and routes are not touched; the
# namespaces are removed at exit. Needs root. docs/multinode.md quotes its figures.
# Usage: tools/tbf_layouts_bench.sh [RATE (tc syntax, default 200mbit)] [bench arguments...]
#   e.g. tools/tbf_layouts_bench.sh 200mbit --elements=2000000 --iterations=5
# Extra mpirun arguments through MPIRUN_ARGS (e.g. "--mca coll_han_priority 100").
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${1:-200mbit}"
[ $# -gt 0 ] && shift
bazel build --config=nocuda //collectives:mpi_layouts_bench >/dev/null
bench="$PWD/bazel-bin/collectives/mpi_layouts_bench"
prefix="strata_tbf$$"
subnet=10.213.7
work="$(mktemp -d /tmp/strata_tbf.XXXXXX)"
cleanup() {
  for ns in "${prefix}_n0" "${prefix}_n1" "${prefix}_br"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "${prefix}_br"
ip netns exec "${prefix}_br" ip link add br0 type bridge
ip netns exec "${prefix}_br" ip link set br0 up
for i in 0 1; do
  ns="${prefix}_n$i"
  ip netns add "$ns"
  ip link add "st${$}v$i" type veth peer name "st${$}p$i"
  ip link set "st${$}v$i" netns "$ns"
  ip link set "st${$}p$i" netns "${prefix}_br"
  ip netns exec "${prefix}_br" ip link set "st${$}p$i" master br0
  ip netns exec "${prefix}_br" ip link set "st${$}p$i" up
  ip netns exec "$ns" ip addr add "$subnet.$((i + 1))/24" dev "st${$}v$i"
  ip netns exec "$ns" ip link set "st${$}v$i" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" tc qdisc add dev "st${$}v$i" root tbf rate "$rate" burst 256kb latency 50ms
done

# mpirun's rsh agent: AGENT HOST CMD... runs CMD in the namespace of the node at HOST.
cat > "$work/agent.sh" <<AGENT
#!/usr/bin/env bash
host="\$1"; shift
case "\$host" in
  $subnet.1) ns=${prefix}_n0; name=tbf-node0 ;;
  $subnet.2) ns=${prefix}_n1; name=tbf-node1 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; exec sh -c \"\\\$0\"" "\$*"
AGENT
chmod +x "$work/agent.sh"

echo "2 nodes x 2 ranks, links limited to $rate (tc tbf, egress of each node); $(lscpu | grep 'Model name' | sed 's/  */ /g')"
TMPDIR="$work" ip netns exec "${prefix}_n0" unshare --uts sh -c "hostname tbf-node0; exec mpirun \
  --allow-run-as-root --oversubscribe --host $subnet.1:2,$subnet.2:2 -np 4 \
  --mca plm_rsh_agent $work/agent.sh --mca btl tcp,self,vader \
  --mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24 \
  ${MPIRUN_ARGS:-} $bench $*"
