# Sourced by the runners (demo.sh, run_lanes.sh, page_swap_report.sh):
#   source scripts/job_env.sh DIR
# sets the environment of every process they start:
# - DIR not empty: JAX's persistent compilation cache in DIR, so a program compiled once (an
#   SFT or RL step of one packed shape, the engine's generation at one batch shape) is loaded
#   from disk by every later stage, method and world of the experiment, not compiled again. A
#   size cap (4 GiB) turns on the cache's file lock, so two lanes read and write it safely. A
#   JAX_COMPILATION_CACHE_DIR of your own wins; "" turns it off.
# - glibc's malloc asks for transparent huge pages (GLIBC_TUNABLES glibc.malloc.hugetlb=1):
#   XLA:CPU maps each execution's temporary buffers afresh (~860 MB for the main job's SFT
#   step), and the kernel faults them in 2 MiB at a time instead of 4 KiB (209,000 minor faults
#   a step become ~900; benchmarks/README.md `## hugepages`). Numerics are unchanged; kept
#   with any tunables of your own. Not for the test suite: its long-lived xdist workers ran
#   it no faster (and perhaps slower) on 2026-12-07.
if [ -n "${1:-}" ]; then
  export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR-$1}"
  export JAX_COMPILATION_CACHE_MAX_SIZE="${JAX_COMPILATION_CACHE_MAX_SIZE:-4294967296}"
fi
case ":${GLIBC_TUNABLES:-}:" in
  *:glibc.malloc.hugetlb=*) ;;
  *) export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1" ;;
esac
