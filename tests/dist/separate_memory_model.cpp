// ngpt's float model on separate_memory_backend, compiled once (separate_memory_models.hpp
// declares it extern; a definition may follow that declaration in the same unit).
#include "separate_memory_models.hpp"

template class normlab::Transformer<float, normlab::variants::ngpt::scheme, normlab::variants::ngpt::residual,
                                    normlab::testing::separate_memory_backend>;
