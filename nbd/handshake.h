#pragma once
// Phase 1 of a connection: the fixed newstyle greeting and the client flags.

#include <array>
#include <cstddef>
#include <span>

#include "absl/status/statusor.h"
#include "nbd/protocol.h"

namespace ftl::nbd {

struct ClientFlags {
  bool fixed_newstyle = false;
  bool no_zeroes = false;
};

// NBDMAGIC, IHAVEOPT, FIXED_NEWSTYLE | NO_ZEROES.
std::array<std::byte, kGreetingSize> EncodeGreeting();

// InvalidArgument for a bit the server did not offer: the spec says the
// server must then drop the connection.
absl::StatusOr<ClientFlags> ParseClientFlags(std::span<const std::byte, 4> raw);

}  // namespace ftl::nbd
