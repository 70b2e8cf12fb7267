// diag::diagnose_checkpoint, compiled once for the programs that link
// normlab_diag: it builds whichever built-in variant a checkpoint names, so it
// instantiates the diagnosis for all ten (their models come from
// normlab_models where built). diag/diagnostics.hpp declares it without a body
// under NORMLAB_PREBUILT_DIAG.
#define NORMLAB_DIAG_LIBRARY_CHECKPOINT
#include "normlab/diag/diagnostics.hpp"
