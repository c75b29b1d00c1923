#pragma once
// On-media format of a mirror device's label: who the device is and what it
// knows about the other devices of its mirror (docs/decisions.md, "Issue 22:
// mirrors and scrub"). Grammar (integers little-endian, "block" = 4096 bytes):
//
//   device  := label_A label_B reserved        (kLabelAreaBytes: 1 MiB)
//              | data                           (the pool: src/log/log_format.h,
//                                                byte 0 of the pool = kLabelAreaBytes)
//   label   := (one block, A at byte 0, B at byte 4096; the valid copy with
//              the highest generation wins; both are written, A then B, each
//              followed by a sync)
//              In superblock clothing (log_format.h "superblock" with
//              format_version 8), so that a build older than format version
//              8 refuses the device ("format version 8") instead of taking
//              it for an unformatted one:
//              magic u64 "FTLDSUPR" | format_version u32 = 8 | set_uuid 16B
//              | generation u64 | block_size u32 = 4096 | zero u32 | zero u32
//              | zero u32 | data_offset u64 (= kLabelAreaBytes) | device_bytes u64
//              | zero u64 | zero u8 | zero u8 | zero u64{6} | body string
//              | zero u64 | xxh3 u64 (of everything before it)
//   string  := len u16 | bytes
//   body    := label_magic u64 "FTLDLABL" | label_version u32 = 1 | kind u8 (1 mirror)
//              | device_guid 16B | data_bytes u64 | member_count u32 | member{member_count}
//   member  := guid 16B | state u8 | name string
//
// set_uuid names the mirror (all its devices carry it); device_guid names
// this device; data_bytes is the size of the pool's media (the same on
// every device). member states: 0 ONLINE (holds every write), 1 OFFLINE
// (taken offline: stale), 2 FAULTED (failed or missing: stale), 3
// RESILVERING (being copied to: stale until the copy ends). Only ONLINE
// devices are read. A state change is durable on the devices that stay
// ONLINE before any write skips the device it demotes. name is the path the
// device was last opened as (a hint for `device online`; identity is the
// guid).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ftl::media {

inline constexpr uint64_t kLabelAreaBytes = 1ull << 20;
inline constexpr uint32_t kLabelFormatVersion = 8;  // log_format.h kFormatVersion
inline constexpr uint64_t kLabelMagic = 0x4C42414C444C5446ull;  // "FTLDLABL" in byte order
inline constexpr uint32_t kLabelVersion = 1;
inline constexpr uint8_t kLabelKindMirror = 1;
inline constexpr uint32_t kMaxMirrorDevices = 8;

using Guid = std::array<std::byte, 16>;
std::string GuidToString(const Guid& g);
Guid NewGuid();

enum class MemberState : uint8_t { kOnline = 0, kOffline = 1, kFaulted = 2, kResilvering = 3 };

struct LabelMember {
  Guid guid{};
  MemberState state = MemberState::kOnline;
  std::string name;
};

struct Label {
  Guid set_uuid{};
  uint64_t generation = 0;
  uint64_t device_bytes = 0;
  Guid device_guid{};
  uint64_t data_bytes = 0;
  std::vector<LabelMember> members;
  // Index of this device in members, -1 if it is not one.
  int self() const;
};

// Exactly one block.
std::vector<std::byte> EncodeLabel(const Label& l);
// NotFound: no label (no superblock magic, or a superblock that is not a
// label). DataLoss: checksum mismatch or a malformed body.
absl::StatusOr<Label> DecodeLabel(std::span<const std::byte> block);

}  // namespace ftl::media
