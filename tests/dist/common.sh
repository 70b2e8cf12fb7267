# Shared by the data-parallel tests: how they launch MPI jobs.
# Open MPI refuses root unless told (CI containers run as root); --oversubscribe
# lets a 2-rank test run on a machine with fewer free cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# In sanitized builds: what Open MPI itself keeps allocated at exit is not normlab's.
# Open MPI unloads its plugins at MPI_Finalize, which leaves their allocations
# without a module name; keeping them loaded lets the suppressions match.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(dirname "${BASH_SOURCE[0]}")/lsan.supp"
# Full stacks through Open MPI's libraries (built without frame pointers), so they match too.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
mpi() {  # mpi N EXE ARGS...
  local n=$1
  shift
  mpirun --oversubscribe -np "$n" "$@"
}
# The runs of every test: small enough for seconds; --dp-bucket 4096 (of ~164k
# gradients) makes backward start many all-reduces while it runs, as at full size.
tiny=(--data synthetic --steps 20 --batch 4 --seq 64 --d 64 --layers 2 --heads 4
      --eval-every 10 --eval-batches 2 --ckpt-every 5 --threads 1 --quiet --dp-bucket 4096)
