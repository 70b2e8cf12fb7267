#pragma once
// normlab::ablate: what `normlab-ablate` computes from the runs (ablate_runs.hpp)
// and how it reports them (ablate_report.hpp). Nothing here runs a process, so all
// of it is unit-tested.
#include "normlab/app/ablate_report.hpp"
#include "normlab/app/ablate_runs.hpp"
