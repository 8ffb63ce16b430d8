# A Slurm cluster on the simulated nodes of nodes.sh (sourced by bash, after nodes.sh and
# nodes_up): Debian's slurm-wlm 22.05 with munge, slurmctld on node0 and one slurmd per node
# (`slurmd -N nodeK`, run inside node K), proctrack/linuxproc, task/none, PMIx for
# `srun --mpi=pmix`. Everything it writes is under the nodes' directory ($NODES_DIR/slurm:
# config, munge key and socket, state, spool, logs; each node's job temp dir in its local
# directory), never under /etc, /run or /var; its daemons run inside the nodes, so nodes.sh's
# exit trap kills them with everything else.
#
#   source nodes.sh; source slurm.sh
#   slurm_require               # SKIPPED (a failure under STRATA_MULTINODE_REQUIRED=1)
#   nodes_up 2
#   slurm_up                    # cluster of every node, 2 CPUs each; waits until all idle
#   slurm_srun -N 2 --ntasks-per-node=2 -- strata train ...   # srun --mpi=pmix from node0
#   slurm_client sbatch --wait -N 2 job.sh                    # any client, from node0
#
# Slurm reads $SLURM_CONF (exported by slurm_up) for its config; the clients (srun, sinfo)
# run inside node0 through on_node so that they reach slurmctld at node0's address.

slurm_require() {
  nodes_require_root
  local missing="" tool
  for tool in munged slurmctld slurmd srun sinfo; do
    command -v "$tool" > /dev/null || missing="$missing $tool"
  done
  if [ -z "$missing" ] && ! ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so > /dev/null 2>&1 \
     && ! ls /usr/lib/slurm/mpi_pmix*.so > /dev/null 2>&1; then
    missing=" Slurm's mpi/pmix plugin"
  fi
  [ -z "$missing" ] && return 0
  local why="a Slurm cluster needs Debian's slurmd, slurmctld, slurm-client and munge"
  why="$why (missing:$missing; tools/install_deps.sh installs them)"
  if [ "${STRATA_MULTINODE_REQUIRED:-0}" = 1 ]; then
    nodes_fail "$why, and STRATA_MULTINODE_REQUIRED=1 (a skip is a failure here)"
  fi
  echo "SKIPPED: $why"
  exit 0
}

# slurm_up [CPUS]: munged, slurmctld on node0 and a slurmd on every node (CPUS each, 2 by
# default), then waits until every node is idle (SLURM_UP_TIMEOUT seconds, 60).
slurm_up() {
  local cpus="${1:-2}" k names=""
  SLURM_DIR="$NODES_DIR/slurm"
  mkdir -p "$SLURM_DIR"/{munge,sock,state,log,spool}
  chmod 700 "$SLURM_DIR/munge"
  chmod 755 "$SLURM_DIR/sock"  # munged wants its socket's directory open to all
  # A key of this cluster's own (munged refuses one that others can read).
  head -c 1024 /dev/urandom > "$SLURM_DIR/munge/munge.key"
  chmod 400 "$SLURM_DIR/munge/munge.key"
  # munged runs in node0 (so the exit trap ends it) and serves every node through its
  # socket: a Unix socket is reached through the file system, whatever the network
  # namespace. --force: the nodes' directory is private to root (0700), which munged would
  # otherwise refuse as its socket's parent.
  on_node 0 munged --force --key-file "$SLURM_DIR/munge/munge.key" \
    --socket "$SLURM_DIR/sock/munge" --pid-file "$SLURM_DIR/munge/munged.pid" \
    --log-file "$SLURM_DIR/log/munged.log" --seed-file "$SLURM_DIR/munge/seed" \
    || { cat "$SLURM_DIR/log/munged.log" >&2; nodes_fail "munged did not start"; }
  for ((k = 0; k < NODES_N; k++)); do
    names="$names${names:+,}node$k"
    mkdir -p "$SLURM_DIR/spool/node$k" "$(nodes_local_dir "$k")/slurm-tmp"
  done
  SLURM_CONF="$SLURM_DIR/slurm.conf"
  {
    echo "ClusterName=strata"
    echo "SlurmctldHost=node0($NODES_SUBNET.1)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$SLURM_DIR/sock/munge"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "MpiDefault=none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "ReturnToService=2"
    # Job ids of this cluster's own: Open MPI names its shared-memory segments (in the
    # machine's /dev/shm) after the host and the PMIx namespace, slurm.pmix.JOB.STEP, so
    # two clusters side by side that both start at job 1 on node0 would share segments
    # (seen: a rank's SIGSEGV, a hung step). Below Slurm's MaxJobId (67043328).
    echo "FirstJobId=$(( ($$ % 60000) * 1000 + RANDOM % 1000 + 1 ))"
    # The nodes' CPUs as configured here, whatever the machine has.
    echo "SlurmdParameters=config_overrides"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "MailProg=/bin/true"
    echo "PlugStackConfig=$SLURM_DIR/plugstack.conf"
    echo "StateSaveLocation=$SLURM_DIR/state"
    echo "SlurmctldPidFile=$SLURM_DIR/slurmctld.pid"
    echo "SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log"
    # Per node (%n): its spool (PMIx's server directories too), pid file and log.
    echo "SlurmdSpoolDir=$SLURM_DIR/spool/%n"
    echo "SlurmdPidFile=$SLURM_DIR/slurmd.%n.pid"
    echo "SlurmdLogFile=$SLURM_DIR/log/slurmd.%n.log"
    # Jobs' temp dir (PMIx's client directories): node-local, as on a real cluster; a
    # shared one makes the nodes' step daemons collide on the same names.
    echo "TmpFS=$NODES_LOCAL/slurm-tmp"
    for ((k = 0; k < NODES_N; k++)); do
      echo "NodeName=node$k NodeAddr=$NODES_SUBNET.$((k + 1)) CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=all Nodes=$names Default=YES MaxTime=INFINITE State=UP"
  } > "$SLURM_CONF"
  : > "$SLURM_DIR/plugstack.conf"
  # slurmd loads a cgroup plugin even with proctrack/linuxproc and task/none; `ip netns
  # exec` mounts a fresh /sys without cgroups, so autodetection fails. cgroup/v1 at a
  # mount point of the test's own (nothing is mounted or created there: no plugin here
  # uses cgroups) lets it start without touching the machine's cgroups.
  mkdir -p "$SLURM_DIR/cgroup"
  {
    echo "CgroupPlugin=cgroup/v1"
    echo "CgroupMountpoint=$SLURM_DIR/cgroup"
    echo "CgroupAutomount=no"
  } > "$SLURM_DIR/cgroup.conf"
  export SLURM_CONF SLURM_DIR
  on_node 0 slurmctld -D -c -f "$SLURM_CONF" > "$SLURM_DIR/log/slurmctld.out" 2>&1 &
  for ((k = 0; k < NODES_N; k++)); do
    on_node "$k" slurmd -D -N "node$k" -f "$SLURM_CONF" > "$SLURM_DIR/log/slurmd$k.out" 2>&1 &
  done
  local deadline=$((SECONDS + ${SLURM_UP_TIMEOUT:-60})) states
  while :; do
    states="$(on_node 0 sinfo -h -N -o '%N %T' 2> /dev/null | sort -u)"
    [ "$(grep -c ' idle$' <<< "$states")" = "$NODES_N" ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      slurm_logs >&2
      nodes_fail "slurm_up: not every node idle after ${SLURM_UP_TIMEOUT:-60} s: $states"
    fi
    sleep 0.3
  done
}

# The tail of every daemon's log (for a failure's report).
slurm_logs() {
  local f
  for f in "$SLURM_DIR"/log/*; do
    echo "== $f"
    tail -n 20 "$f"
  done
}

# slurm_client COMMAND...: a Slurm client command (srun, sbatch, sinfo, ...) run in node0,
# with Open MPI told to use the nodes' subnet (what mpirun's --mca options say in
# nodes_mpirun, as OMPI_MCA_* variables, which srun and sbatch hand on to every task);
# killed after $NODES_TIMEOUT seconds (300).
slurm_client() {
  OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include="$NODES_CIDR" \
    OMPI_MCA_oob_tcp_if_include="$NODES_CIDR" \
    timeout -k 5 "${NODES_TIMEOUT:-300}" "$NODES_DIR/on_node" 0 "$@"
}

# slurm_srun SRUN_ARGS... -- COMMAND...: srun --mpi=pmix from node0 (a later --mpi in
# SRUN_ARGS wins).
slurm_srun() {
  local args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  slurm_client srun --mpi=pmix "${args[@]}" "$@"
}
