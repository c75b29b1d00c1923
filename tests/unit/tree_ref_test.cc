// Tests for include/ftl/tree_ref.h: the one parser of "VOL@SNAP".

#include "ftl/tree_ref.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ftl/snapshot.h"

namespace ftl {
namespace {

TreeRef Ok(std::string_view text) {
  auto r = TreeRef::Parse(text);
  EXPECT_TRUE(r.ok()) << "'" << text << "': " << r.status();
  return r.ok() ? *r : TreeRef{"<error>", "<error>"};
}

// The error message for a text that must not parse (InvalidArgument,
// quoting the text).
std::string Bad(std::string_view text) {
  auto r = TreeRef::Parse(text);
  EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << r->volume << " / " << r->snapshot;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  std::string message(r.status().message());
  EXPECT_NE(message.find(absl::StrCat("'", absl::string_view(text.data(), text.size()), "'")),
            std::string::npos)
      << message;
  return message;
}

TEST(TreeRefTest, ParsesTheFourForms) {
  EXPECT_EQ(Ok(""), (TreeRef{"", ""}));
  EXPECT_EQ(Ok("ftl0"), (TreeRef{"ftl0", ""}));
  EXPECT_EQ(Ok("ftl0@daily"), (TreeRef{"ftl0", "daily"}));
  EXPECT_EQ(Ok("@daily"), (TreeRef{"", "daily"}));
  EXPECT_FALSE(Ok("ftl0").is_snapshot());
  EXPECT_FALSE(Ok("").is_snapshot());
  EXPECT_TRUE(Ok("@daily").is_snapshot());
  EXPECT_EQ(Ok("a.b-c_D9@x.y-Z_0"), (TreeRef{"a.b-c_D9", "x.y-Z_0"}));
  std::string longest(64, 'v');
  EXPECT_EQ(Ok(longest + "@" + longest), (TreeRef{longest, longest}));
}

TEST(TreeRefTest, ToStringIsWhatParseReads) {
  for (const TreeRef& r : {TreeRef{"", ""}, TreeRef{"vol", ""}, TreeRef{"vol", "snap"},
                           TreeRef{"", "snap"}}) {
    EXPECT_EQ(Ok(r.ToString()), r) << r.ToString();
  }
  EXPECT_EQ((TreeRef{"", ""}).ToString(), "");
  EXPECT_EQ((TreeRef{"vol", ""}).ToString(), "vol");
  EXPECT_EQ((TreeRef{"vol", "snap"}).ToString(), "vol@snap");
  EXPECT_EQ((TreeRef{"", "snap"}).ToString(), "@snap");
}

TEST(TreeRefTest, EmptySnapshotPartIsRefused) {
  EXPECT_NE(Bad("ftl0@").find("VOLUME@SNAPSHOT or @SNAPSHOT"), std::string::npos);
  Bad("@");
}

TEST(TreeRefTest, AtMostOneAt) {
  EXPECT_NE(Bad("a@b@c").find("at most one '@'"), std::string::npos);
  Bad("@a@b");
  Bad("a@@b");
  Bad("@@");
  Bad("a@b@");
}

TEST(TreeRefTest, NamesFollowTheCatalogueRules) {
  std::vector<std::string> bads = {"has space", "tab\t", "a/b", "../etc", "é", "a\nb", "x:y",
                                   ".", "..", std::string(65, 'x'), std::string("nul\0", 4)};
  for (const std::string& bad : bads) {
    SCOPED_TRACE(bad);
    EXPECT_NE(Bad(bad).find("bad volume name"), std::string::npos);
    EXPECT_NE(Bad(bad + "@snap").find("bad volume name"), std::string::npos);
    EXPECT_NE(Bad("vol@" + bad).find("bad snapshot name"), std::string::npos);
    EXPECT_NE(Bad("@" + bad).find("bad snapshot name"), std::string::npos);
  }
}

// The parser applies the catalogue name rule (ValidCatalogName, which the
// engine checks new names with) to both parts of a reference.
TEST(TreeRefTest, NameRuleMatchesTheEngine) {
  std::vector<std::string> names = {"a", "A", "0", "ftl0", "a.b", "a-b", "a_b", ".a", "a.",
                                    "...", ".", "..", "", "a b", "a@b", "a/b", "é", "a\tb",
                                    std::string(64, 'n'), std::string(65, 'n')};
  for (int c = 1; c < 256; ++c) names.push_back(std::string("x") + char(c));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    std::string why;
    bool engine = ValidCatalogName(name, &why);
    if (name.empty() || name.find('@') != std::string::npos) {
      EXPECT_FALSE(engine);
      continue;
    }
    EXPECT_EQ(TreeRef::Parse(name).ok(), engine);
    EXPECT_EQ(TreeRef::Parse("v@" + name).ok(), engine);
  }
}

}  // namespace
}  // namespace ftl
