// How many other tasks compete for this machine's cores right now (Linux /proc).
#pragma once

namespace decodelab {

// Runnable tasks outside this process: /proc/loadavg's count of runnable tasks less this
// process's own running threads (/proc/self/task/*/stat). -1 where /proc cannot tell.
// DECODELAB_LOADAVG, read once, names a file in /proc/loadavg's format to read instead: the tests
// set the machine's load with it, so that what they check does not depend on other programs.
int other_runnable_tasks();

}  // namespace decodelab
