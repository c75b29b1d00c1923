#include "nbd/handshake.h"

#include "absl/strings/str_format.h"

namespace ftl::nbd {

std::array<std::byte, kGreetingSize> EncodeGreeting() {
  std::array<std::byte, kGreetingSize> out{};
  PutBe64(&out[0], kNbdMagic);
  PutBe64(&out[8], kOptMagic);
  PutBe16(&out[16], kFlagFixedNewstyle | kFlagNoZeroes);
  return out;
}

absl::StatusOr<ClientFlags> ParseClientFlags(std::span<const std::byte, 4> raw) {
  uint32_t flags = GetBe32(raw.data());
  if (flags & ~(kClientFixedNewstyle | kClientNoZeroes)) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown client flags 0x%08x", flags));
  }
  return ClientFlags{.fixed_newstyle = (flags & kClientFixedNewstyle) != 0,
                     .no_zeroes = (flags & kClientNoZeroes) != 0};
}

}  // namespace ftl::nbd
