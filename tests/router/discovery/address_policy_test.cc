// Which addresses a discovery source may turn into workers (issue 27): the ranges refused by
// default and what admits them, allowed_networks and allowed_ports, IPv4-mapped IPv6, CIDR
// parsing, and refusals reported once while they last.
#include "router/discovery/address_policy.h"

#include "common/cidr.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

using ::testing::HasSubstr;
using R = AddressRefusal;

TEST(Cidr, ParsesAndContains) {
  auto net = common::ParseCidr("10.0.0.0/8");
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ(net->ToString(), "10.0.0.0/8");
  EXPECT_TRUE(net->Contains(*common::ParseIpAddress("10.255.1.2")));
  EXPECT_FALSE(net->Contains(*common::ParseIpAddress("11.0.0.1")));
  EXPECT_FALSE(net->Contains(*common::ParseIpAddress("fd00::1")));
  auto v6 = common::ParseCidr("fd00::/8");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->Contains(*common::ParseIpAddress("[fd12::5]")));
  EXPECT_FALSE(v6->Contains(*common::ParseIpAddress("fe80::1")));
  // Prefixes inside a byte: .5 has its last bit beyond /23, .4 does not.
  EXPECT_FALSE(common::ParseCidr("192.168.5.0/23").ok());
  EXPECT_TRUE(common::ParseCidr("192.168.4.0/23").ok());
  ASSERT_TRUE(common::ParseCidr("192.168.4.0/22").ok());
  EXPECT_TRUE(
      common::ParseCidr("192.168.4.0/22")->Contains(*common::ParseIpAddress("192.168.7.9")));
  EXPECT_FALSE(
      common::ParseCidr("192.168.4.0/22")->Contains(*common::ParseIpAddress("192.168.8.1")));
  EXPECT_EQ(common::ParseCidr("10.1.2.3")->prefix, 32u);
  EXPECT_EQ(common::ParseCidr("::1")->prefix, 128u);
  EXPECT_THAT(std::string(common::ParseCidr("10.0.0.1/8").status().message()),
              HasSubstr("host bits"));
  EXPECT_FALSE(common::ParseCidr("10.0.0.0/33").ok());
  EXPECT_FALSE(common::ParseCidr("fd00::/129").ok());
  EXPECT_FALSE(common::ParseCidr("vllm.local/8").ok());
  EXPECT_FALSE(common::ParseCidr("10.0.0.0/").ok());
  EXPECT_FALSE(common::ParseIpAddress("fe80::1%eth0"));
}

TEST(AddressPolicy, RefusesSpecialRangesByDefault) {
  const AddressPolicy p({}, {});
  EXPECT_EQ(p.Check("10.4.0.17", 8000), R::kNone);
  EXPECT_EQ(p.Check("fd00::5", 8000), R::kNone);
  EXPECT_EQ(p.Check("0.0.0.0", 8000), R::kUnspecified);
  EXPECT_EQ(p.Check("::", 8000), R::kUnspecified);
  EXPECT_EQ(p.Check("127.0.0.1", 8000), R::kLoopback);
  EXPECT_EQ(p.Check("127.9.8.7", 8000), R::kLoopback);
  EXPECT_EQ(p.Check("::1", 8000), R::kLoopback);
  EXPECT_EQ(p.Check("[::1]", 8000), R::kLoopback);
  EXPECT_EQ(p.Check("169.254.1.1", 8000), R::kLinkLocal);
  EXPECT_EQ(p.Check("fe80::1", 8000), R::kLinkLocal);
  EXPECT_EQ(p.Check("febf::1", 8000), R::kLinkLocal);  // fe80::/10 ends at febf
  EXPECT_EQ(p.Check("fec0::1", 8000), R::kNone);
  EXPECT_EQ(p.Check("169.254.169.254", 80), R::kMetadata);
  EXPECT_EQ(p.Check("fd00:ec2::254", 80), R::kMetadata);
  // An AAAA record carrying an IPv4 address is that address.
  EXPECT_EQ(p.Check("::ffff:127.0.0.1", 8000), R::kLoopback);
  EXPECT_EQ(p.Check("::ffff:169.254.169.254", 8000), R::kMetadata);
  EXPECT_EQ(p.Check("vllm.local", 8000), R::kMalformed);
  EXPECT_EQ(p.Check("", 8000), R::kMalformed);
}

TEST(AddressPolicy, OnlyAnExplicitEntryAdmitsASpecialRange) {
  // "Everything" is not a decision to admit loopback or the metadata service.
  const AddressPolicy all({"0.0.0.0/0", "::/0"}, {});
  EXPECT_EQ(all.Check("10.1.1.1", 1), R::kNone);
  EXPECT_EQ(all.Check("127.0.0.1", 1), R::kLoopback);
  EXPECT_EQ(all.Check("0.0.0.0", 1), R::kUnspecified);
  EXPECT_EQ(all.Check("::1", 1), R::kLoopback);
  EXPECT_EQ(all.Check("169.254.169.254", 1), R::kMetadata);

  const AddressPolicy loopback({"127.0.0.0/8"}, {});
  EXPECT_EQ(loopback.Check("127.0.0.1", 1), R::kNone);
  EXPECT_EQ(loopback.Check("127.0.0.3", 1), R::kNone);
  EXPECT_EQ(loopback.Check("10.0.0.1", 1), R::kNetwork);  // the list bounds everything else
  EXPECT_EQ(loopback.Check("::1", 1), R::kLoopback);
  EXPECT_EQ(loopback.Check("0.0.0.0", 1), R::kUnspecified);

  // Link-local admitted, the metadata address inside it still not; it needs its own entry.
  const AddressPolicy link({"169.254.0.0/16"}, {});
  EXPECT_EQ(link.Check("169.254.3.4", 1), R::kNone);
  EXPECT_EQ(link.Check("169.254.169.254", 1), R::kMetadata);
  EXPECT_EQ(AddressPolicy({"169.254.169.254/32"}, {}).Check("169.254.169.254", 1), R::kNone);
}

TEST(AddressPolicy, NetworksAndPorts) {
  const AddressPolicy p({"10.4.0.0/16", "fd00:1::/32"}, {8000, 8001});
  EXPECT_EQ(p.Check("10.4.200.1", 8000), R::kNone);
  EXPECT_EQ(p.Check("10.4.200.1", 8001), R::kNone);
  EXPECT_EQ(p.Check("10.4.200.1", 9090), R::kPort);
  EXPECT_EQ(p.Check("10.5.0.1", 8000), R::kNetwork);
  EXPECT_EQ(p.Check("192.168.1.1", 8000), R::kNetwork);
  EXPECT_EQ(p.Check("fd00:1:2::9", 8000), R::kNone);
  EXPECT_EQ(p.Check("fd00:2::9", 8000), R::kNetwork);
  EXPECT_EQ(AddressPolicy({}, {8000}).Check("192.168.1.1", 8001), R::kPort);
  EXPECT_STREQ(AddressRefusalName(R::kLinkLocal), "link_local");
  EXPECT_STREQ(AddressRefusalName(R::kMetadata), "metadata");
}

TEST(RefusedAddresses, ReportedOnceWhileTheyLast) {
  RefusedAddresses seen;
  const RefusedAddress lo{"127.0.0.1", 8000, R::kLoopback};
  const RefusedAddress md{"169.254.169.254", 80, R::kMetadata};
  auto fresh = seen.Update({lo, lo});
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].address, "127.0.0.1");
  EXPECT_TRUE(seen.Update({lo}).empty());  // every poll: not again
  fresh = seen.Update({lo, md});
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].reason, R::kMetadata);
  EXPECT_TRUE(seen.Update({}).empty());
  EXPECT_EQ(seen.Update({lo}).size(), 1u);  // gone, then back: a new refusal
}

}  // namespace
}  // namespace kvgate::router
