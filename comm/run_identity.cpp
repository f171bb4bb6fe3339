#include "comm/run_identity.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/temporary_mark.h"

namespace bitparity {

std::string ShareRunIdentity(c10d::Store& store, const RankContext& context) {
  auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  const std::string key = "run_identity/" + variable("TORCHELASTIC_RUN_ID") + "/" +
                          variable("TORCHELASTIC_RESTART_COUNT");
  if (context.rank == 0) {
    std::random_device entropy;
    const uint64_t bits = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
    char drawn[24];
    std::snprintf(drawn, sizeof(drawn), "%016llx", static_cast<unsigned long long>(bits));
    const std::string identity = ThisProcessMark() + "-" + drawn;
    store.set(key, std::vector<uint8_t>(identity.begin(), identity.end()));
  }
  const std::vector<uint8_t> value = store.get(key);
  return std::string(value.begin(), value.end());
}

}  // namespace bitparity
