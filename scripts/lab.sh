#!/usr/bin/env bash
# The network-namespace lab: a real multi-node torchrun job (gloo) over N nodes that are network + PID + UTS +
# mount namespaces on this machine, joined by a bridge; `perftracker attach` (or `run`) on every node into one
# shared run directory; one fault; then `perftracker analyze` of that directory. Everything it creates is
# removed when it ends (namespaces, veths, qdiscs, cgroups, processes), also on Ctrl-C.
#
#   sudo scripts/lab.sh                                  # 3 nodes x 2 ranks, attach, no fault
#   sudo scripts/lab.sh --fault flap                     # node-b's eth0 down for 3 s mid-run
#   sudo scripts/lab.sh --fault rate --mbit 20           # node-b's egress held to 20 Mbit/s (tc tbf)
#   sudo scripts/lab.sh --fault cpu --share 0.06 --nodes 2   # node-b's job held to 0.06 of a core (cgroup)
#   sudo scripts/lab.sh --fault kill --collect run       # node-b dies mid-run, `perftracker run` on every node
#   sudo scripts/lab.sh --help                           # every option (scripts/netlab.py)
#
# Needs root, iproute2 (ip, tc), util-linux (unshare, nsenter) and torch in the Python it runs
# ($PYTHON, else .venv/bin/python, else python3). The run directory is --out (default perftracker-lab-<time>).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python="python3"; fi
fi
args=("$@")
if [[ " ${args[*]-} " != *" --out "* && " ${args[*]-} " != *" --help "* && " ${args[*]-} " != *" -h "* ]]; then
  args+=(--out "perftracker-lab-$(date +%Y%m%d-%H%M%S)")
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" "$repo/scripts/netlab.py" "${args[@]}"
