#pragma once
// normlab::ablate: what `normlab-ablate` computes from the runs (ablate_runs.hpp,
// the sweep and the budgets in ablate_sweep.hpp)
// and how it reports them (ablate_report.hpp). Nothing here runs a process, so all
// of it is unit-tested.
#include "normlab/app/ablate_report.hpp"
#include "normlab/app/ablate_runs.hpp"
#include "normlab/app/ablate_sweep.hpp"
