#include "nbd/protocol.h"

#include "absl/strings/str_cat.h"

namespace ftl::nbd {

std::string CommandName(uint16_t type) {
  switch (type) {
    case kCmdRead: return "READ";
    case kCmdWrite: return "WRITE";
    case kCmdDisc: return "DISC";
    case kCmdFlush: return "FLUSH";
    case kCmdTrim: return "TRIM";
    case kCmdCache: return "CACHE";
    case kCmdWriteZeroes: return "WRITE_ZEROES";
    case kCmdBlockStatus: return "BLOCK_STATUS";
  }
  return absl::StrCat("command ", type);
}

std::string OptionName(uint32_t option) {
  switch (option) {
    case kOptExportName: return "NBD_OPT_EXPORT_NAME";
    case kOptAbort: return "NBD_OPT_ABORT";
    case kOptList: return "NBD_OPT_LIST";
    case kOptStartTls: return "NBD_OPT_STARTTLS";
    case kOptInfo: return "NBD_OPT_INFO";
    case kOptGo: return "NBD_OPT_GO";
    case kOptStructuredReply: return "NBD_OPT_STRUCTURED_REPLY";
    case kOptListMetaContext: return "NBD_OPT_LIST_META_CONTEXT";
    case kOptSetMetaContext: return "NBD_OPT_SET_META_CONTEXT";
  }
  return absl::StrCat("option ", option);
}

}  // namespace ftl::nbd
