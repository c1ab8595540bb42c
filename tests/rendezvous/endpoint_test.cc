#include "infini/rendezvous/endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace infini::rendezvous {
namespace {

TEST(EndpointTest, HostAloneTakesTheDefaultPort) {
  const Endpoint endpoint = ParseEndpoint("node0", 29400);
  EXPECT_EQ(endpoint.host, "node0");
  EXPECT_EQ(endpoint.port, 29400);
}

TEST(EndpointTest, HostAndPortAreSplit) {
  const Endpoint endpoint = ParseEndpoint("10.0.0.1:29500", 29400);
  EXPECT_EQ(endpoint.host, "10.0.0.1");
  EXPECT_EQ(endpoint.port, 29500);
}

TEST(EndpointTest, BracketedIpv6TakesAPort) {
  const Endpoint endpoint = ParseEndpoint("[fe80::1]:123", 29400);
  EXPECT_EQ(endpoint.host, "fe80::1");
  EXPECT_EQ(endpoint.port, 123);
  EXPECT_EQ(ParseEndpoint("[::1]", 7).port, 7);
}

TEST(EndpointTest, BareIpv6IsAHostWithTheDefaultPort) {
  const Endpoint endpoint = ParseEndpoint("::1", 29400);
  EXPECT_EQ(endpoint.host, "::1");
  EXPECT_EQ(endpoint.port, 29400);
}

TEST(EndpointTest, PortBoundsAreAccepted) {
  EXPECT_EQ(ParseEndpoint("h:0", 1).port, 0);
  EXPECT_EQ(ParseEndpoint("h:65535", 1).port, 65535);
}

// Returns the message of the invalid_argument that parsing `text` throws.
std::string ParseError(const std::string& text) {
  try {
    ParseEndpoint(text, 29400);
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  ADD_FAILURE() << "'" << text << "' was accepted";
  return "";
}

TEST(EndpointTest, EmptyTextIsRefused) {
  EXPECT_NE(ParseError("").find("empty"), std::string::npos);
}

TEST(EndpointTest, MissingHostIsRefusedNamingTheText) {
  const std::string message = ParseError(":29400");
  EXPECT_NE(message.find("':29400'"), std::string::npos) << message;
  EXPECT_NE(message.find("host is missing"), std::string::npos) << message;
  EXPECT_NE(ParseError("[]:5").find("host is missing"), std::string::npos);
}

TEST(EndpointTest, BadPortsAreRefused) {
  EXPECT_NE(ParseError("h:abc").find("not a number"), std::string::npos);
  EXPECT_NE(ParseError("h:12x").find("not a number"), std::string::npos);
  EXPECT_NE(ParseError("h:-1").find("not a number"), std::string::npos);
  EXPECT_NE(ParseError("h:65536").find("out of range"), std::string::npos);
  EXPECT_NE(ParseError("h:99999999999999999999").find("out of range"), std::string::npos);
  EXPECT_NE(ParseError("h:").find("port is empty"), std::string::npos);
  EXPECT_NE(ParseError("[::1]x").find("after ']'"), std::string::npos);
  EXPECT_NE(ParseError("[::1:5").find("']'"), std::string::npos);
}

TEST(EndpointTest, FormatRoundTrips) {
  EXPECT_EQ(FormatEndpoint({"node0", 29500}), "node0:29500");
  EXPECT_EQ(FormatEndpoint({"::1", 80}), "[::1]:80");
  for (const Endpoint& endpoint : {Endpoint{"10.0.0.1", 1}, Endpoint{"fe80::2", 65535}}) {
    const Endpoint parsed = ParseEndpoint(FormatEndpoint(endpoint), 0);
    EXPECT_EQ(parsed.host, endpoint.host);
    EXPECT_EQ(parsed.port, endpoint.port);
  }
}

// A non-loopback IPv4 address of this machine, or "" when it has none.
std::string LocalRoutableAddress() {
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return "";
  std::string found;
  for (const ifaddrs* entry = interfaces; entry != nullptr && found.empty();
       entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if ((ntohl(v4->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  freeifaddrs(interfaces);
  return found;
}

TEST(ListenAddressTest, LoopbackStaysLoopbackWhenEveryClientIsLocal) {
  EXPECT_EQ(ListenAddressFor("127.0.0.1", true), "127.0.0.1");
  EXPECT_EQ(ListenAddressFor("::1", true), "::1");
  const std::string localhost = ListenAddressFor("localhost", true);
  EXPECT_TRUE(localhost == "127.0.0.1" || localhost == "::1") << localhost;
}

// Every host connects to a number as written: a numeric loopback address is
// what the clients use, also in a run that says it spans hosts.
TEST(ListenAddressTest, ANumericLoopbackAddressIsListenedOnAsGiven) {
  EXPECT_EQ(ListenAddressFor("127.0.0.1", false), "127.0.0.1");
  EXPECT_EQ(ListenAddressFor("127.0.0.2", false), "127.0.0.2");
  EXPECT_EQ(ChooseListenAddress("127.0.1.1", false).fallback_reason, "");
}

// Debian's /etc/hosts maps the host name to 127.0.1.1: a name that resolves
// here only to loopback, in a run that spans hosts, is widened so the other
// hosts (which resolve it to another address) still reach it, with a reason
// for the caller's warning.
TEST(ListenAddressTest, ANameResolvingOnlyToLoopbackIsWidenedWithAReasonWhenClientsMayBeElsewhere) {
  const ListenChoice choice = ChooseListenAddress("localhost", false);
  EXPECT_EQ(choice.address, "0.0.0.0");
  EXPECT_NE(choice.fallback_reason.find("resolves here only to loopback (127.0.0.1"),
            std::string::npos)
      << choice.fallback_reason;
}

// The case: a name of this host in a run that spans hosts is no
// longer every interface but the name's address here.
TEST(ListenAddressTest, ANameOfANonLoopbackAddressOfThisHostIsListenedOnAlone) {
  const std::string address = LocalRoutableAddress();
  if (address.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  // A name for it without touching /etc/hosts: the machine's own name,
  // where it resolves to such an address.
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) GTEST_SKIP() << "no host name";
  const ListenChoice choice = ChooseListenAddress(name, false);
  if (choice.address == "0.0.0.0") {
    GTEST_SKIP() << "the host name '" << name << "' resolves to no non-loopback address here ("
                 << choice.fallback_reason << "); tests/hosts covers a name in a namespace";
  }
  EXPECT_NE(choice.address, "0.0.0.0");
  EXPECT_EQ(choice.fallback_reason, "");
}

TEST(ListenAddressTest, AnAddressOfThisMachineIsListenedOnAlone) {
  const std::string address = LocalRoutableAddress();
  if (address.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address";
  EXPECT_EQ(ListenAddressFor(address, false), address);
  EXPECT_EQ(ListenAddressFor(address, true), address);
}

// Other hosts may resolve a name to another address of this host: only a
// one-host run narrows a name.
TEST(ListenAddressTest, ANameIsNarrowedOnlyWhenEveryClientIsLocal) {
  EXPECT_EQ(ListenAddressFor("localhost", false), "0.0.0.0");
  EXPECT_NE(ListenAddressFor("localhost", true), "0.0.0.0");
}

TEST(ListenAddressTest, AnAddressThisMachineLacksMeansEveryInterfaceWithAReason) {
  EXPECT_EQ(ListenAddressFor("192.0.2.1", true), "0.0.0.0");  // TEST-NET-1
  EXPECT_EQ(ChooseListenAddress("192.0.2.1", false).fallback_reason,
            "is not an address of this host");
  EXPECT_NE(ChooseListenAddress("no-such-host.invalid", false)
                .fallback_reason.find("cannot be resolved here"),
            std::string::npos);
}

TEST(ListenAddressTest, EveryInterfaceAskedForNeedsNoReason) {
  const ListenChoice choice = ChooseListenAddress("0.0.0.0", false);
  EXPECT_EQ(choice.address, "0.0.0.0");
  EXPECT_EQ(choice.fallback_reason, "");
}

}  // namespace
}  // namespace infini::rendezvous
