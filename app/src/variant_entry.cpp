// One built-in variant's entry for the CPU training driver (variant_entry: the
// model's adapter, checkpoint I/O, sampling), compiled once: CMake compiles this
// file once per variant with -DNORMLAB_ENTRY_VARIANT=<name>, and
// train/model_adapter.hpp declares these instantiations extern under
// NORMLAB_PREBUILT_ENTRIES.
#include "normlab/app/model_adapter.hpp"

#ifndef NORMLAB_ENTRY_VARIANT
#error "app/src/variant_entry.cpp: compile with -DNORMLAB_ENTRY_VARIANT=<variant> (CMake does, once per variant)"
#endif

namespace normlab {
template VariantEntry<cpu_backend> variant_entry<variants::NORMLAB_ENTRY_VARIANT, cpu_backend>();
}  // namespace normlab
