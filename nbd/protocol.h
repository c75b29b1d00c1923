#pragma once
// NBD wire format (NetworkBlockDevice/nbd doc/proto.md), fixed newstyle only.
// Every integer on the wire is big-endian; encode and decode only through
// the helpers of nbd/big_endian.h, never by casting structs.
//
// Grammar (C: client, S: server):
//   greeting   S: "NBDMAGIC" u64 | "IHAVEOPT" u64 | handshake_flags u16
//              C: client_flags u32
//   option     C: "IHAVEOPT" u64 | option u32 | length u32 | data[length]
//   opt reply  S: kOptReplyMagic u64 | option u32 | type u32 | length u32 |
//                 data[length]
//   export_name reply (NBD_OPT_EXPORT_NAME only)
//              S: size u64 | transmission_flags u16 | zeroes[124] (unless
//                 both sides set NO_ZEROES)
//   request    C: kRequestMagic u32 | flags u16 | type u16 | cookie u64 |
//                 offset u64 | length u32 | data[length] (WRITE only)
//   simple     S: kSimpleReplyMagic u32 | error u32 | cookie u64 |
//                 data[length] (successful READ only)
//   chunk      S: kStructuredReplyMagic u32 | flags u16 | type u16 |
//                 cookie u64 | length u32 | payload[length]

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nbd/big_endian.h"

namespace ftl::nbd {

inline constexpr uint64_t kNbdMagic = 0x4e42444d41474943;  // "NBDMAGIC"
inline constexpr uint64_t kOptMagic = 0x49484156454F5054;  // "IHAVEOPT"
inline constexpr uint64_t kOptReplyMagic = 0x3e889045565a9;
inline constexpr uint32_t kRequestMagic = 0x25609513;
inline constexpr uint32_t kSimpleReplyMagic = 0x67446698;
inline constexpr uint32_t kStructuredReplyMagic = 0x668e33ef;

inline constexpr size_t kGreetingSize = 18;
inline constexpr size_t kOptionHeaderSize = 16;
inline constexpr size_t kRequestSize = 28;
inline constexpr size_t kSimpleReplySize = 16;
inline constexpr size_t kChunkHeaderSize = 20;
inline constexpr size_t kMaxString = 4096;

// Handshake flags (server) and client flags.
inline constexpr uint16_t kFlagFixedNewstyle = 1 << 0;
inline constexpr uint16_t kFlagNoZeroes = 1 << 1;
inline constexpr uint32_t kClientFixedNewstyle = 1 << 0;
inline constexpr uint32_t kClientNoZeroes = 1 << 1;

// Transmission flags.
inline constexpr uint16_t kTxHasFlags = 1 << 0;
inline constexpr uint16_t kTxReadOnly = 1 << 1;
inline constexpr uint16_t kTxSendFlush = 1 << 2;
inline constexpr uint16_t kTxSendFua = 1 << 3;
inline constexpr uint16_t kTxRotational = 1 << 4;
inline constexpr uint16_t kTxSendTrim = 1 << 5;
inline constexpr uint16_t kTxSendWriteZeroes = 1 << 6;
inline constexpr uint16_t kTxSendDf = 1 << 7;
inline constexpr uint16_t kTxCanMultiConn = 1 << 8;
inline constexpr uint16_t kTxSendCache = 1 << 10;
inline constexpr uint16_t kTxSendFastZero = 1 << 11;

// Options.
inline constexpr uint32_t kOptExportName = 1;
inline constexpr uint32_t kOptAbort = 2;
inline constexpr uint32_t kOptList = 3;
inline constexpr uint32_t kOptStartTls = 5;
inline constexpr uint32_t kOptInfo = 6;
inline constexpr uint32_t kOptGo = 7;
inline constexpr uint32_t kOptStructuredReply = 8;
inline constexpr uint32_t kOptListMetaContext = 9;
inline constexpr uint32_t kOptSetMetaContext = 10;

// Option reply types.
inline constexpr uint32_t kRepAck = 1;
inline constexpr uint32_t kRepServer = 2;
inline constexpr uint32_t kRepInfo = 3;
inline constexpr uint32_t kRepMetaContext = 4;
inline constexpr uint32_t kRepErrUnsup = 0x80000000u | 1;
inline constexpr uint32_t kRepErrPolicy = 0x80000000u | 2;
inline constexpr uint32_t kRepErrInvalid = 0x80000000u | 3;
inline constexpr uint32_t kRepErrPlatform = 0x80000000u | 4;
inline constexpr uint32_t kRepErrTlsReqd = 0x80000000u | 5;
inline constexpr uint32_t kRepErrUnknown = 0x80000000u | 6;
inline constexpr uint32_t kRepErrShutdown = 0x80000000u | 7;
inline constexpr uint32_t kRepErrBlockSizeReqd = 0x80000000u | 8;
inline constexpr uint32_t kRepErrTooBig = 0x80000000u | 9;

// NBD_INFO_* items inside NBD_REP_INFO.
inline constexpr uint16_t kInfoExport = 0;
inline constexpr uint16_t kInfoName = 1;
inline constexpr uint16_t kInfoDescription = 2;
inline constexpr uint16_t kInfoBlockSize = 3;

// Commands and command flags.
inline constexpr uint16_t kCmdRead = 0;
inline constexpr uint16_t kCmdWrite = 1;
inline constexpr uint16_t kCmdDisc = 2;
inline constexpr uint16_t kCmdFlush = 3;
inline constexpr uint16_t kCmdTrim = 4;
inline constexpr uint16_t kCmdCache = 5;
inline constexpr uint16_t kCmdWriteZeroes = 6;
inline constexpr uint16_t kCmdBlockStatus = 7;

inline constexpr uint16_t kCmdFlagFua = 1 << 0;
inline constexpr uint16_t kCmdFlagNoHole = 1 << 1;
inline constexpr uint16_t kCmdFlagDf = 1 << 2;
inline constexpr uint16_t kCmdFlagReqOne = 1 << 3;
inline constexpr uint16_t kCmdFlagFastZero = 1 << 4;

// Structured replies.
inline constexpr uint16_t kReplyFlagDone = 1 << 0;
inline constexpr uint16_t kReplyTypeNone = 0;
inline constexpr uint16_t kReplyTypeOffsetData = 1;
inline constexpr uint16_t kReplyTypeOffsetHole = 2;
inline constexpr uint16_t kReplyTypeBlockStatus = 5;
inline constexpr uint16_t kReplyTypeError = (1 << 15) | 1;
inline constexpr uint16_t kReplyTypeErrorOffset = (1 << 15) | 2;

// base:allocation flags.
inline constexpr uint32_t kStateHole = 1 << 0;
inline constexpr uint32_t kStateZero = 1 << 1;
inline constexpr std::string_view kBaseAllocation = "base:allocation";
inline constexpr uint32_t kBaseAllocationId = 1;

// Error values on the wire.
inline constexpr uint32_t kEPerm = 1;
inline constexpr uint32_t kEIo = 5;
inline constexpr uint32_t kENoMem = 12;
inline constexpr uint32_t kEInval = 22;
inline constexpr uint32_t kENoSpc = 28;
inline constexpr uint32_t kEOverflow = 75;
inline constexpr uint32_t kENotSup = 95;
inline constexpr uint32_t kEShutdown = 108;

// Block size constraints advertised in NBD_INFO_BLOCK_SIZE. kMinBlockSize
// binds only clients that asked for NBD_INFO_BLOCK_SIZE in NBD_OPT_GO; the
// others get the spec's default minimum of 1 (docs/decisions.md).
inline constexpr uint32_t kMinBlockSize = 512;
inline constexpr uint32_t kDefaultMinBlockSize = 1;
inline constexpr uint32_t kPreferredBlockSize = 4096;
inline constexpr uint32_t kMaxPayload = 32u << 20;

// Names for logs: "READ", "NBD_OPT_GO", ...
std::string CommandName(uint16_t type);
std::string OptionName(uint32_t option);

}  // namespace ftl::nbd
