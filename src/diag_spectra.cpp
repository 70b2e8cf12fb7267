// The diagnostics' eigen-solvers (diag::singular_values, diag::covariance_spectrum:
// Eigen's BDCSVD and SelfAdjointEigenSolver), compiled once for the programs that
// link normlab_diag; diag/diagnostics.hpp declares them without a body under
// NORMLAB_PREBUILT_DIAG.
#define NORMLAB_DIAG_LIBRARY_SOLVERS
#include "normlab/diag/linalg.hpp"
