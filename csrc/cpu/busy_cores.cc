#include "decodelab/busy_cores.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace decodelab {

namespace {
// The state letter of one thread's /proc/.../stat line, or 0.
char thread_state(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // "pid (comm) S ...": the name may hold spaces and parentheses, so look after the last ')'.
  const char* close = std::strrchr(buf, ')');
  return close && close[1] == ' ' ? close[2] : 0;
}
}  // namespace

int other_runnable_tasks() {
  static const std::string loadavg = [] {
    const char* path = std::getenv("DECODELAB_LOADAVG");
    return std::string(path && *path ? path : "/proc/loadavg");
  }();
  FILE* f = std::fopen(loadavg.c_str(), "r");
  if (!f) return -1;
  int running = 0, total = 0;
  const int got = std::fscanf(f, "%*f %*f %*f %d/%d", &running, &total);
  std::fclose(f);
  if (got != 2) return -1;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int own = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    own += thread_state(std::string("/proc/self/task/") + e->d_name + "/stat") == 'R';
  }
  closedir(d);
  return running > own ? running - own : 0;
}

}  // namespace decodelab
