#include "core/error.hpp"

#include <unistd.h>

namespace hpct {

namespace {
ProcessIdentity& identity_storage() {
  static ProcessIdentity id = [] {
    ProcessIdentity p;
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) p.host = buf;
    return p;
  }();
  return id;
}

std::string where(const char* file, int line) {
  const auto& id = process_identity();
  return fmt::format("[rank {} on {}] {}:{}", id.rank < 0 ? 0 : id.rank, id.host, file, line);
}
}  // namespace

const ProcessIdentity& process_identity() { return identity_storage(); }

void set_process_identity(int rank, int world) {
  identity_storage().rank = rank;
  identity_storage().world = world;
}

Error::Error(std::string cause, const char* file, int line)
    : std::runtime_error(where(file, line) + ": " + cause),
      cause_(std::move(cause)),
      file_(file),
      line_(line),
      rank_(process_identity().rank) {}

void throw_error(const char* file, int line, std::string cause) { throw Error(std::move(cause), file, line); }
void throw_usage_error(const char* file, int line, std::string cause) {
  throw UsageError(std::move(cause), file, line);
}

void throw_rank_usage_error(const char* file, int line, std::string cause) {
  throw RankUsageError(std::move(cause), file, line);
}

}  // namespace hpct
