// include/ftl/pool.h: names of dataset kinds, as ftlctl and the control
// socket print them.

#include "ftl/pool.h"

namespace ftl {

const char* DatasetKindName(DatasetKind k) {
  switch (k) {
    case DatasetKind::kBlock:
      return "volume";
    case DatasetKind::kKv:
      return "kv";
  }
  return "unknown";
}

}  // namespace ftl
