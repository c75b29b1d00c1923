#pragma once
// The control protocol of ftld as both ends compile it: the daemon's
// control socket (control/control.h and the command handlers) and ftlctl
// (tools/ftlctl.cc). Header-only, no dependencies beyond libc, so a client
// includes it without linking the server. The README's "Control protocol"
// section lists every command's arguments and result fields.
//
// Transport: a Unix stream socket, mode 0600, at ftld --control PATH
// (default kSocketDir/<BACKING basename>.sock). ftlctl takes --control,
// else $FTLD_CONTROL (kSocketEnv), else the only *.sock in kSocketDir.
//
// Framing: one JSON object per line each way, replies in request order. A
// '\r' before the '\n' is dropped and blank lines are skipped.
//   request  {"cmd":NAME[,"action":VERB][,"id":ANY], arguments...}
//   reply    {"ok":true[,"id":ANY], results...}
//            {"ok":false,"error":SENTENCE,"code":CODE[,"id":ANY]}
// "id" is echoed whenever the request parsed as an object; CODE is the
// absl status code name ("NOT_FOUND", "INVALID_ARGUMENT", ...).
// Limits: a line of kMaxControlLine bytes or more gets an error reply and
// the daemon closes the connection; arrays and objects nested deeper than
// kMaxControlDepth (the request object is level 1) get INVALID_ARGUMENT
// without being parsed (so without the "id" echo).
//
// Names below: kField* are the envelope, kCmd* the commands, kAction* the
// verbs of "snapshot", "range", "kv" and "volume", kArg* their arguments, and kPolicy* /
// kAttr* the values those arguments take; kMaxKv* bound a "kv" reply. Result fields are per command
// and live with their handlers.

#include <sys/un.h>

#include <cstddef>

namespace ftl::control {

// ---- transport --------------------------------------------------------
inline constexpr char kSocketDir[] = "/run/ftld";
inline constexpr char kSocketSuffix[] = ".sock";
inline constexpr char kSocketEnv[] = "FTLD_CONTROL";
// Longest socket path: sun_path holds it and its terminating NUL.
inline constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;

// ---- framing and limits -----------------------------------------------
inline constexpr char kLineEnd = '\n';
inline constexpr size_t kMaxControlLine = 1 << 20;
// Copying a JSON value (the "id" echo) and printing it recurse once per
// level; 70,000 levels overflowed the daemon's stack.
inline constexpr size_t kMaxControlDepth = 64;

// ---- envelope ---------------------------------------------------------
inline constexpr char kFieldCmd[] = "cmd";
inline constexpr char kFieldAction[] = "action";
inline constexpr char kFieldId[] = "id";
inline constexpr char kFieldOk[] = "ok";
inline constexpr char kFieldError[] = "error";
inline constexpr char kFieldCode[] = "code";
// ftlctl passes unknown commands through: "CMD A key=V" becomes
// {"cmd":"CMD","args":["A"],"key":V}.
inline constexpr char kFieldArgs[] = "args";

// ---- commands ---------------------------------------------------------
inline constexpr char kCmdHelp[] = "help";
inline constexpr char kCmdStatus[] = "status";
inline constexpr char kCmdStats[] = "stats";
inline constexpr char kCmdExports[] = "exports";
inline constexpr char kCmdCheckpoint[] = "checkpoint";
inline constexpr char kCmdGc[] = "gc";
inline constexpr char kCmdSnapshot[] = "snapshot";
inline constexpr char kCmdRange[] = "range";
inline constexpr char kCmdKv[] = "kv";
inline constexpr char kCmdDevice[] = "device";  // issue 22: a mirror's devices
inline constexpr char kCmdScrub[] = "scrub";
inline constexpr char kCmdVolume[] = "volume";

// ---- actions ("action") -------------------------------------------------
// snapshot
inline constexpr char kActionCreate[] = "create";
inline constexpr char kActionList[] = "list";
inline constexpr char kActionDelete[] = "delete";
inline constexpr char kActionActivate[] = "activate";
inline constexpr char kActionDeactivate[] = "deactivate";
inline constexpr char kActionRollback[] = "rollback";
// range
inline constexpr char kActionClone[] = "clone";
inline constexpr char kActionMove[] = "move";
inline constexpr char kActionBatch[] = "batch";
inline constexpr char kActionMerge[] = "merge";
inline constexpr char kActionAttr[] = "attr";
inline constexpr char kActionAttrs[] = "attrs";
// kv (also kActionCreate, kActionList, kActionDelete)
inline constexpr char kActionDestroy[] = "destroy";
inline constexpr char kActionPut[] = "put";
inline constexpr char kActionGet[] = "get";
inline constexpr char kActionScan[] = "scan";
inline constexpr char kActionStats[] = "stats";
// volume (also kActionCreate, kActionList, kActionDestroy)
inline constexpr char kActionResize[] = "resize";

// ---- arguments ----------------------------------------------------------
inline constexpr char kArgMinFreeSegments[] = "min_free_segments";  // gc
// snapshot: a snapshot is "name" of "volume" (absent: the primary volume)
inline constexpr char kArgName[] = "name";
inline constexpr char kArgVolume[] = "volume";
inline constexpr char kArgExport[] = "export";
inline constexpr char kArgForce[] = "force";
inline constexpr char kArgReadOnly[] = "read_only";
// range: sizes are byte counts or strings with a K/M/G/T suffix; "from"
// and "to" are tree references (include/ftl/tree_ref.h)
inline constexpr char kArgSrc[] = "src";
inline constexpr char kArgDst[] = "dst";
inline constexpr char kArgLen[] = "len";
inline constexpr char kArgFrom[] = "from";
inline constexpr char kArgTo[] = "to";
inline constexpr char kArgOps[] = "ops";  // batch: [{"op":..,"src":..,...}]
inline constexpr char kArgOp[] = "op";    // kActionClone or kActionMove
inline constexpr char kArgBase[] = "base";
inline constexpr char kArgSources[] = "sources";
inline constexpr char kArgPolicy[] = "policy";
inline constexpr char kArgOffset[] = "offset";
inline constexpr char kArgLength[] = "length";
inline constexpr char kArgAttr[] = "attr";
// kv: "name" is a dataset ("NAME", or "NAME@SNAP" where reads take one).
// Keys and values are bytes: a field "key" holds them as a JSON string when
// they are valid UTF-8, else "key_b64" holds them in base64 (RFC 4648 with
// padding); exactly one of the two (control/kv_wire.h). The same for
// "value", and for "from" / "to" of a scan (where they are keys, not tree
// references as in range requests).
inline constexpr char kArgKey[] = "key";
inline constexpr char kArgValue[] = "value";
inline constexpr char kBase64Suffix[] = "_b64";
inline constexpr char kArgSync[] = "sync";          // put/delete: default true
inline constexpr char kArgGeometry[] = "geometry";  // create: "page=4096,pages=28,..."
inline constexpr char kArgLimit[] = "limit";        // scan: at most this many entries
// device: "device" names one by path, index or guid; replace: "old", "new"
// (a path); online: "path" if the device was missing. scrub start: "rate"
// (bytes a second, or a size string; 0 = unlimited).
inline constexpr char kArgDevice[] = "device";
inline constexpr char kArgOld[] = "old";
inline constexpr char kArgNew[] = "new";
inline constexpr char kArgPath[] = "path";
inline constexpr char kArgRate[] = "rate";
inline constexpr char kActionOffline[] = "offline";
inline constexpr char kActionOnline[] = "online";
inline constexpr char kActionReplace[] = "replace";
inline constexpr char kActionStart[] = "start";
inline constexpr char kActionStop[] = "stop";
inline constexpr char kActionStatus[] = "status";
// volume: "name" is a volume (or dataset, for list and destroy); "size" a
// byte count or a string with a K/M/G/T suffix
inline constexpr char kArgSize[] = "size";

// ---- argument values ----------------------------------------------------
inline constexpr char kPolicyFail[] = "fail";  // the default
inline constexpr char kPolicyFirst[] = "first";
inline constexpr char kPolicyLast[] = "last";
inline constexpr char kAttrImmutable[] = "immutable";
inline constexpr char kAttrMutable[] = "mutable";
inline constexpr char kAttrPersistent[] = "persistent";
inline constexpr char kAttrNonPersistent[] = "non-persistent";

// ---- kv limits ----------------------------------------------------------
// One scan reply holds at most kMaxKvScanLimit entries and stops after the
// entry that brings its keys and values to kMaxKvScanBytes; it then says
// "more": true and "next" (the key to continue from). A put's key and value
// must fit one request line (kMaxControlLine) once encoded, which the
// engine's own limits (kMaxKeyBytes, kMaxValueBytes in include/ftl/kv.h)
// always do, even in base64.
inline constexpr size_t kMaxKvScanLimit = 10000;
inline constexpr size_t kMaxKvScanBytes = 1 << 20;

}  // namespace ftl::control
