# Sourced by the runners (demo.sh, run_lanes.sh, page_swap_report.sh):
#   source scripts/compile_cache.sh DIR
# turns on JAX's persistent compilation cache in DIR for every process they start, so a
# program compiled once (an SFT or RL step of one packed shape, the engine's generation at one
# batch shape) is loaded from disk by every later stage, method and world of the experiment
# instead of compiled again. A size cap (4 GiB) turns on the cache's file lock, so two lanes
# read and write it safely. A JAX_COMPILATION_CACHE_DIR of your own wins; "" turns it off.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR-$1}"
export JAX_COMPILATION_CACHE_MAX_SIZE="${JAX_COMPILATION_CACHE_MAX_SIZE:-4294967296}"
