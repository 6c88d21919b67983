// How many other tasks compete for this machine's cores right now (Linux /proc).
#pragma once

namespace decodelab {

// Runnable tasks outside this process: /proc/loadavg's count of runnable tasks less this
// process's own running threads (/proc/self/task/*/stat). -1 where /proc cannot tell.
int other_runnable_tasks();

}  // namespace decodelab
