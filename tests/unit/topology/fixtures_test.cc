// The recorded real machines in tests/fixtures/topology: nearest NIC sets and classes as
// expected-nearest.json gives them, and a balanced plan for each.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "mini_json.hpp"
#include "plan_checks.hpp"
#include "topology/distance.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

namespace fs = std::filesystem;

fs::path fixtures_dir() {
  const char* root = std::getenv("XPORT_SOURCE_ROOT");
  return fs::path(root ? root : ".") / "tests" / "fixtures" / "topology";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TopologyFixtures : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fixtures_dir();
    // Always present in CI: a missing folder is a broken checkout, not a reason to skip.
    ASSERT_TRUE(fs::exists(dir_ / "expected-nearest.json"))
        << "topology fixtures not found at " << dir_
        << " (XPORT_SOURCE_ROOT must point at the repository; fixtures live in "
           "tests/fixtures/topology)";
    expected_ = test::parse_json(read_file(dir_ / "expected-nearest.json"));
  }
  fs::path dir_;
  test::Json expected_;
};

TEST_F(TopologyFixtures, EveryFixtureFileHasExpectations) {
  size_t files = 0;
  for (const char* sub : {"hwloc", "nccl"}) {
    for (const auto& e : fs::directory_iterator(dir_ / sub)) {
      if (e.path().extension() != ".xml") continue;
      ++files;
      std::string key = std::string(sub) + "/" + e.path().filename().string();
      EXPECT_TRUE(expected_.has(key)) << key << " has no entry in expected-nearest.json";
    }
  }
  EXPECT_GE(files, 13u);
}

TEST_F(TopologyFixtures, NearestSetsClassesAndBalancedPlans) {
  for (const auto& [file, want] : expected_.obj) {
    SCOPED_TRACE(file);
    auto topo = load_file((dir_ / file).string());
    ASSERT_TRUE(topo.ok()) << topo.status().to_string();
    EXPECT_EQ(topo->source, want["format"].str == "hwloc" ? Source::hwloc_xml : Source::nccl_xml);

    std::set<std::string> want_gpus, got_gpus, want_nics, got_nics;
    for (const auto& g : want["gpus"].arr) want_gpus.insert(g["pci"].str);
    for (const auto& n : want["nics"].arr) want_nics.insert(n.str);
    for (const Gpu& g : topo->gpus) got_gpus.insert(g.pci.to_string());
    for (const Nic& n : topo->nics) got_nics.insert(n.pci.to_string());
    EXPECT_EQ(got_gpus, want_gpus) << "GPU inventory differs";
    EXPECT_EQ(got_nics, want_nics) << "NIC inventory differs";

    for (const auto& g : want["gpus"].arr) {
      size_t index = topo->gpus.size();
      for (size_t i = 0; i < topo->gpus.size(); ++i)
        if (topo->gpus[i].pci.to_string() == g["pci"].str) index = i;
      ASSERT_LT(index, topo->gpus.size()) << g["pci"].str;
      Nearest near = nearest_nics(*topo, index);
      std::set<std::string> want_set, got_set;
      for (const auto& n : g["nearest"].arr) want_set.insert(n.str);
      for (size_t n : near.nics) got_set.insert(topo->nics[n].pci.to_string());
      EXPECT_EQ(got_set, want_set) << "nearest NICs of GPU " << g["pci"].str;
      if (g["class"].type == test::Json::Type::null) {
        EXPECT_TRUE(near.nics.empty());
      } else {
        EXPECT_EQ(std::string(to_string(near.path.distance)), g["class"].str)
            << "class of GPU " << g["pci"].str;
      }
      // Names: the rail name of each nearest NIC is among the OS names the machine had.
      std::set<std::string> names;
      for (const auto& n : g["names"].arr) names.insert(n.str);
      bool by_class = !names.empty() && names.begin()->rfind("class=", 0) == 0;
      for (size_t n : near.nics) {
        if (!by_class) {
          EXPECT_TRUE(names.count(topo->nics[n].name)) << topo->nics[n].name;
        }
      }
    }

    auto p = plan(*topo, PlanOptions{std::string()});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    test::check_balanced(*topo, *p, file);
    if (topo->gpus.empty() || topo->nics.empty()) {
      EXPECT_TRUE(p->empty());
      EXPECT_FALSE(p->explanation.empty()) << "an empty plan must say why";
    } else {
      EXPECT_FALSE(p->empty());
      EXPECT_TRUE(p->explanation.empty()) << p->explanation;
    }
  }
}

TEST_F(TopologyFixtures, AwsP4dPlanIsOneEfaPerGpuPair) {
  auto topo = load_file((dir_ / "hwloc/aws-p4d.24xlarge.xml").string());
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  auto p = plan(*topo, PlanOptions{std::string()});
  ASSERT_TRUE(p.ok());
  auto got = test::by_address(*topo, *p);
  std::map<std::string, std::vector<std::string>> want{
      {"0000:10:1c.0", {"0000:10:1b.0"}}, {"0000:10:1d.0", {"0000:10:1b.0"}},
      {"0000:20:1c.0", {"0000:20:1b.0"}}, {"0000:20:1d.0", {"0000:20:1b.0"}},
      {"0000:90:1c.0", {"0000:90:1b.0"}}, {"0000:90:1d.0", {"0000:90:1b.0"}},
      {"0000:a0:1c.0", {"0000:a0:1b.0"}}, {"0000:a0:1d.0", {"0000:a0:1b.0"}}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(topo->nics[0].name, "rdmap16s27");
  EXPECT_EQ(topo->nics[0].kind, "efa");
  EXPECT_EQ(topo->gpus[0].numa, 0);
  EXPECT_EQ(topo->gpus[7].numa, 1);
}

TEST_F(TopologyFixtures, TiedNicsAreSharedOneEach) {
  // Azure NDv4: two GPUs and two IB NICs behind each switch; IBM AC922: two GPUs, one dual-port
  // CX-5 per socket. Each GPU must get its own NIC, never both GPUs on one.
  for (const char* file : {"nccl/azure-ndv4-a100.xml", "hwloc/ibm-ac922-power9-v100.xml"}) {
    SCOPED_TRACE(file);
    auto topo = load_file((dir_ / file).string());
    ASSERT_TRUE(topo.ok()) << topo.status().to_string();
    auto p = plan(*topo, PlanOptions{std::string()});
    ASSERT_TRUE(p.ok());
    std::set<size_t> used;
    for (const GpuRails& g : p->gpus) {
      ASSERT_EQ(g.rails.size(), 1u);
      EXPECT_TRUE(used.insert(g.rails[0].nic).second) << "NIC shared while a tied one is idle";
    }
    EXPECT_EQ(used.size(), topo->nics.size());
  }
}

TEST_F(TopologyFixtures, BmcDisplayAdapterAndEnaAreNotPlanned) {
  auto sl390 = load_file((dir_ / "hwloc/hp-sl390s-mlx4.xml").string());
  ASSERT_TRUE(sl390.ok());
  EXPECT_EQ(sl390->gpus.size(), 3u) << "the ES1000 VGA of the BMC is not a GPU";
  for (const Gpu& g : sl390->gpus) EXPECT_NE(g.pci.to_string(), "0000:01:03.0");
  ASSERT_EQ(sl390->nics.size(), 1u);
  EXPECT_EQ(sl390->nics[0].name, "mlx4_0");
  EXPECT_EQ(sl390->nics[0].kind, "infiniband");
  EXPECT_EQ(sl390->nics[0].aliases, (std::vector<std::string>{"eth2", "ib0"}));

  auto slingshot = load_file((dir_ / "hwloc/hpe-ex235a-mi250x-slingshot.xml").string());
  ASSERT_TRUE(slingshot.ok());
  EXPECT_EQ(slingshot->nics.size(), 4u) << "the Intel i210 management port is not a NIC";
  for (const Nic& n : slingshot->nics) EXPECT_EQ(n.kind, "cxi");
  for (const Gpu& g : slingshot->gpus) EXPECT_EQ(g.vendor, "amd");
}

TEST_F(TopologyFixtures, NcclAndHwlocAgreeOnP4dPairs) {
  // The same machine from two sources: the pairs must match (classes differ: the static NCCL file
  // models each pair's PCIe switch, the VM's hwloc sees host bridges).
  auto h = load_file((dir_ / "hwloc/aws-p4d.24xlarge.xml").string());
  auto n = load_file((dir_ / "nccl/aws-p4d-static.xml").string());
  ASSERT_TRUE(h.ok() && n.ok());
  auto ph = plan(*h, PlanOptions{std::string()});
  auto pn = plan(*n, PlanOptions{std::string()});
  ASSERT_TRUE(ph.ok() && pn.ok());
  EXPECT_EQ(test::by_address(*h, *ph), test::by_address(*n, *pn));
}

TEST_F(TopologyFixtures, JsonOfEveryFixtureParsesWithTheDocumentedShape) {
  for (const auto& [file, want] : expected_.obj) {
    SCOPED_TRACE(file);
    auto topo = load_file((dir_ / file).string());
    ASSERT_TRUE(topo.ok());
    auto p = plan(*topo, PlanOptions{std::string()});
    ASSERT_TRUE(p.ok());
    test::Json j;
    ASSERT_NO_THROW(j = test::parse_json(to_json(*topo, *p)));
    ASSERT_EQ(j["gpus"].arr.size(), topo->gpus.size());
    ASSERT_EQ(j["nics"].arr.size(), topo->nics.size());
    for (const auto& g : j["gpus"].arr) {
      EXPECT_EQ(g["pci"].type, test::Json::Type::string);
      EXPECT_TRUE(g["numa"].type == test::Json::Type::number ||
                  g["numa"].type == test::Json::Type::null);
      for (const auto& r : g["rails"].arr) {
        EXPECT_EQ(r["nic"].type, test::Json::Type::string);
        EXPECT_TRUE(PciAddress::parse(r["pci"].str).ok());
        EXPECT_TRUE(
            std::set<std::string>({"PIX", "PXB", "PHB", "NODE", "SYS"}).count(r["distance"].str));
      }
    }
    for (const auto& n : j["nics"].arr) {
      EXPECT_FALSE(n["name"].str.empty());
      EXPECT_TRUE(PciAddress::parse(n["pci"].str).ok());
      EXPECT_TRUE(n.has("numa"));
    }
    EXPECT_EQ(j["explanation"].str, p->explanation);
    // The other renderings must not choke either.
    EXPECT_NE(to_text(*topo, *p).find("Topology"), std::string::npos);
    EXPECT_EQ(to_dot(*topo, *p).rfind("graph topology {", 0), 0u);
  }
}

// The text itself, as docs/tools.md shows it: the top object and its arrays one member per line,
// each GPU and NIC compact on its line, no spaces; a port's rate without trailing zeros.
TEST_F(TopologyFixtures, JsonTextIsTheDocumentedLayout) {
  auto topo = load_file((dir_ / "hwloc" / "aws-p4d.24xlarge.xml").string());
  ASSERT_TRUE(topo.ok());
  auto p = plan(*topo, PlanOptions{std::string()});
  ASSERT_TRUE(p.ok());
  const std::string json = to_json(*topo, *p);
  const std::string head =
      "{\n"
      "  \"source\":\"hwloc-xml\",\n"
      "  \"gpus\":[\n"
      "    {\"pci\":\"0000:10:1c.0\",\"numa\":0,\"vendor\":\"nvidia\",\"model\":\"GA100 [A100 SXM4 "
      "40GB]\",\"cpus\":\"0-23\",\"link\":\"31.5 GB/s\",\"rails\":[{\"nic\":\"rdmap16s27\","
      "\"pci\":\"0000:10:1b.0\",\"distance\":\"PHB\",\"hops\":2}],\"overridden\":false},\n";
  EXPECT_EQ(json.substr(0, head.size()), head);
  const std::string nics =
      "\n  ],\n"
      "  \"nics\":[\n"
      "    {\"name\":\"rdmap16s27\",\"pci\":\"0000:10:1b.0\",\"numa\":0,\"kind\":\"efa\","
      "\"provider\":\"\",\"model\":\"Elastic Fabric Adapter (EFA)\",\"cpus\":\"0-23\","
      "\"link\":\"\",\"aliases\":[],\"ports\":[]},\n";
  EXPECT_NE(json.find(nics), std::string::npos) << json;
  const std::string tail =
      "\"aliases\":[],\"ports\":[]}\n"
      "  ],\n"
      "  \"explanation\":\"\",\n"
      "  \"notes\":[]\n"
      "}\n";
  ASSERT_GE(json.size(), tail.size());
  EXPECT_EQ(json.substr(json.size() - tail.size()), tail);

  // Unknown NUMA is null, a port's rate loses its trailing zeros, notes get a line each, and
  // hostile text (control characters, invalid UTF-8) is escaped so that the output parses.
  Topology t;
  t.source = Source::live;
  Nic n;
  n.name = "mlx5_0";
  n.numa = -1;
  n.model = "bad\x01\xff\"name\"";
  n.ports.push_back({1, "ACTIVE", 12.5});
  n.ports.push_back({2, "DOWN", 400});
  t.nics.push_back(n);
  t.notes = {"one", "two"};
  Plan none;
  const std::string small = to_json(t, none);
  EXPECT_NE(small.find("\"numa\":null"), std::string::npos) << small;
  EXPECT_NE(small.find("\"model\":\"bad\\u0001\\ufffd\\\"name\\\"\""), std::string::npos) << small;
  EXPECT_NE(small.find("\"ports\":[{\"port\":1,\"state\":\"ACTIVE\",\"rate_gbps\":12.5},"
                       "{\"port\":2,\"state\":\"DOWN\",\"rate_gbps\":400}]"),
            std::string::npos)
      << small;
  EXPECT_NE(small.find("  \"gpus\":[],\n"), std::string::npos) << small;
  EXPECT_NE(small.find("  \"notes\":[\n    \"one\",\n    \"two\"\n  ]\n}\n"), std::string::npos)
      << small;
  EXPECT_NO_THROW(test::parse_json(small));
}

}  // namespace
}  // namespace xport::topology
