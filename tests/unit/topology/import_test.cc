// The hwloc and NCCL importers on small hand-written inputs: classification rules, format
// detection, and clear errors for wrong types, missing attributes and impossible trees.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "topology/distance.hpp"
#include "topology/live.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

std::string hwloc(const std::string& io) {
  return "<topology version=\"2.0\"><object type=\"Machine\" os_index=\"0\" cpuset=\"0xff\">"
         "<object type=\"Package\" os_index=\"0\" cpuset=\"0x0f\"><object type=\"NUMANode\" "
         "os_index=\"0\"/>" +
         io + "</object></object></topology>";
}

std::string dev(const std::string& bus, const std::string& type, const std::string& inner = "") {
  return "<object type=\"PCIDev\" pci_busid=\"" + bus + "\" pci_type=\"" + type +
         "\" pci_link_speed=\"15.75\">" + inner + "</object>";
}

std::string osdev(const std::string& name, int type, const std::string& subtype = "") {
  return "<object type=\"OSDev\" name=\"" + name + "\" osdev_type=\"" + std::to_string(type) +
         "\"" + (subtype.empty() ? "" : " subtype=\"" + subtype + "\"") + "/>";
}

std::string host_bridge(const std::string& inner) {
  return "<object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[00-ff]\">" +
         inner + "</object>";
}

std::string bridge(const std::string& bus, const std::string& inner) {
  return "<object type=\"Bridge\" bridge_type=\"1-1\" pci_busid=\"" + bus +
         "\" pci_type=\"0604 [8086:2030] [0000:0000] 00\">" + inner + "</object>";
}

TEST(TopologyHwlocImport, ClassifiesGpusAndNics) {
  std::string io = host_bridge(
      dev("0000:01:00.0", "0302 [10de:20b0] [10de:134f] a1") +                     // GPU
      dev("0000:02:00.0", "0300 [1a03:2000] [1a03:2000] 41") +                     // ASPEED BMC
      dev("0000:03:00.0", "0300 [1002:515e] [003c:00fb] 02") +                     // ES1000 BMC
      dev("0000:04:00.0", "0300 [1002:744c] [1002:0e3b] c8", osdev("rsmi0", 1)) +  // Radeon + ROCm
      dev("0000:05:00.0", "1200 [1002:74a1] [1002:74a1] 00") +                     // MI300X
      dev("0000:06:00.0", "0200 [1d0f:ec20] [1d0f:ec20] 00", osdev("ens5", 2)) +   // ENA: no
      dev("0000:07:00.0", "0200 [1d0f:efa1] [1d0f:efa1] 00") +                     // EFA, no osdev
      dev("0000:08:00.0", "0200 [15b3:101d] [15b3:0040] 00",
          osdev("ens8np0", 2) + osdev("mlx5_3", 3)) +                             // RoCE
      dev("0000:09:00.0", "0207 [15b3:1021] [15b3:0041] 00") +                    // IB, no osdev
      dev("0000:0a:00.0", "0200 [17db:0501] [17db:0000] 02", osdev("hsi0", 2)) +  // Slingshot
      dev("0000:0b:00.0", "0200 [8086:1537] [ffff:0000] 03", osdev("eno1", 2)));  // plain NIC
  auto t = parse(hwloc(io));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<std::string> gpus, nics;
  for (const Gpu& g : t->gpus) gpus.push_back(g.pci.to_string());
  for (const Nic& n : t->nics) nics.push_back(n.name + "/" + n.kind);
  EXPECT_EQ(gpus, (std::vector<std::string>{"0000:01:00.0", "0000:04:00.0", "0000:05:00.0"}));
  EXPECT_EQ(nics, (std::vector<std::string>{"0000:07:00.0/efa", "mlx5_3/rdma",
                                            "0000:09:00.0/infiniband", "hsi0/cxi"}));
  EXPECT_EQ(t->nics[1].aliases, std::vector<std::string>{"ens8np0"});
  EXPECT_EQ(t->gpus[0].numa, 0);
  EXPECT_EQ(t->gpus[0].cpus, "0-3");
  EXPECT_EQ(t->gpus[0].link.to_string(), "15.8 GB/s");
}

TEST(TopologyHwlocImport, ProviderNicsNameNicsAndAdmitEthernet) {
  std::string io =
      host_bridge(dev("0000:08:00.0", "0200 [15b3:101d] [15b3:0040] 00", osdev("mlx5_3", 3)) +
                  dev("0000:06:00.0", "0200 [1d0f:efa0] [1d0f:efa0] 00", osdev("rdmap6s0", 3)) +
                  dev("0000:0b:00.0", "0200 [8086:1537] [ffff:0000] 03", osdev("eno1", 2)));
  auto doc = hwloc(io);
  // Through the live entry point's importer with provider data.
  std::vector<ProviderNic> nics{
      {"mlx5_3", "0000:08:00.0", "verbs"},      {"rdmap6s0-rdm", "0000:06:00.0", "efa"},
      {"rdmap6s0-dgrm", "0000:06:00.0", "efa"}, {"eno1", "0000:0b:00.0", "tcp"},
      {"ghost", "0000:77:00.0", "tcp"},         {"broken", "not-an-address", "tcp"}};
  auto t = discover_from(doc, nics, "/nonexistent-sysfs");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->nics.size(), 3u);
  EXPECT_EQ(t->nics[0].name, "rdmap6s0-rdm");  // shortest libfabric domain
  EXPECT_EQ(t->nics[0].provider, "efa");
  EXPECT_EQ(t->nics[1].name, "mlx5_3");
  EXPECT_EQ(t->nics[2].name, "eno1");
  EXPECT_EQ(t->nics[2].kind, "ethernet");
  std::string notes;
  for (const std::string& n : t->notes) notes += n + "\n";
  EXPECT_NE(notes.find("'ghost' (tcp) names PCI device 0000:77:00.0"), std::string::npos) << notes;
  EXPECT_NE(notes.find("'broken' (tcp) has no usable PCI address"), std::string::npos) << notes;
}

TEST(TopologyHwlocImport, SwitchesCountAsOneBridgeEach) {
  // root port -> switch (up, 2 downs) -> GPU and NIC: PIX. A second switch below: PXB.
  std::string io = host_bridge(bridge(
      "0000:00:01.0",
      bridge("0000:01:00.0",
             bridge("0000:02:00.0", dev("0000:03:00.0", "0302 [10de:20b0] [10de:134f] a1")) +
                 bridge("0000:02:01.0", dev("0000:04:00.0", "0207 [15b3:1021] [15b3:0041] 00")) +
                 bridge("0000:02:02.0",
                        bridge("0000:05:00.0",
                               bridge("0000:06:00.0",
                                      dev("0000:07:00.0", "0302 [10de:20b0] [10de:134f] a1")))))));
  auto t = parse(hwloc(io));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->gpus.size(), 2u);
  EXPECT_EQ(path_between(*t, t->gpus[0], t->nics[0]).distance, Distance::pix);
  EXPECT_EQ(path_between(*t, t->gpus[1], t->nics[0]).distance, Distance::pxb);
  EXPECT_EQ(path_between(*t, t->gpus[0], t->nics[0]).hops, 4);
}

TEST(TopologyHwlocImport, NoIoObjectsIsExplainedNotAnError) {
  auto t = parse(hwloc(""));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->gpus.empty());
  ASSERT_FALSE(t->notes.empty());
  EXPECT_NE(t->notes[0].find("without I/O devices"), std::string::npos);
}

TEST(TopologyHwlocImport, WrongTypesAndImpossibleTreesAreClearErrors) {
  struct Case {
    std::string xml, needle;
  } cases[] = {
      {hwloc(host_bridge(dev("0000:01:00.0", "zz02 [10de:20b0] [10de:134f] a1"))), "bad pci_type"},
      {hwloc(host_bridge(dev("0000:01:00.0", "0302"))), "bad pci_type"},
      {hwloc(host_bridge(dev("0000:01:00.0", "0302 [10de:20bx] [10de:134f] a1"))),
       "bad vendor:device"},
      {hwloc(host_bridge(dev("0000:01:0.0.0", "0302 [10de:20b0] [10de:134f] a1"))),
       "bad PCI address"},
      {hwloc(host_bridge("<object type=\"PCIDev\" pci_type=\"0302 [10de:20b0] [0:0] 0\"/>")),
       "without pci_busid"},
      {hwloc(dev("0000:01:00.0", "0302 [10de:20b0] [10de:134f] a1")), "outside any host bridge"},
      {hwloc(bridge("0000:00:01.0", "")), "PCI bridge outside any host bridge"},
      {hwloc(host_bridge(host_bridge(""))), "host bridge inside a PCI tree"},
      {hwloc(host_bridge("<object type=\"Bridge\" bridge_type=\"7-1\"/>")), "unknown bridge_type"},
      {hwloc(host_bridge("<object type=\"Bridge\"/>")), "without a valid bridge_type"},
      {hwloc(host_bridge(dev("0000:01:00.0", "0302 [10de:20b0] [10de:134f] a1") +
                         dev("0000:01:00.0", "0207 [15b3:1021] [15b3:0041] 00"))),
       "appears twice"},
      {hwloc(host_bridge(dev("0000:01:00.0", "0302 [10de:20b0] [10de:134f] a1",
                             dev("0000:02:00.0", "0302 [10de:20b0] [10de:134f] a1")))),
       "inside PCI device"},
      {hwloc(host_bridge("<object type=\"Core\"/>")), "a Core object inside the PCI tree"},
      {hwloc("<object/>"), "<object> without a type"},
      {"<topology version=\"x\"/>", "bad topology version"},
      {"<topology version=\"2.0\"/>", "has no <object>"},
      {hwloc(
           host_bridge(dev("0000:01:00.0", "0207 [15b3:1021] [15b3:0041] 00", osdev("mlx5_0", 3)) +
                       dev("0000:02:00.0", "0207 [15b3:1021] [15b3:0041] 00", osdev("mlx5_0", 3)))),
       "two NICs are named 'mlx5_0'"},
  };
  for (const Case& c : cases) {
    auto t = parse(c.xml, Format::hwloc_xml);
    ASSERT_FALSE(t.ok()) << "accepted: " << c.xml;
    EXPECT_EQ(t.status().code(), Code::invalid_argument);
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos)
        << "expected '" << c.needle << "', got: " << t.status().message();
  }
}

TEST(TopologyNcclImport, DumpAndStaticFormsAndErrors) {
  const std::string good =
      "<system version=\"2\"><cpu numaid=\"1\" affinity=\"0000ff00\">"
      "<pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" "
      "link_width=\"16\">"
      "<pci busid=\"0000:11:00.0\" class=\"0x030200\" vendor=\"0x10de\"><gpu dev=\"0\"/></pci>"
      "<pci busid=\"0000:12:00.0\" class=\"0x020000\" vendor=\"0x15b3\"><nic>"
      "<net name=\"mlx5_4\" port=\"1\" speed=\"400000\" guid=\"0x1\"/><net name=\"mlx5_4\" "
      "port=\"2\" speed=\"400000\"/></nic></pci>"
      "<pci busid=\"0000:13:00.0\" class=\"0x020000\"/>"
      "</pci><nic><net name=\"socket0\"/></nic></cpu></system>";
  auto t = parse(good);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->source, Source::nccl_xml);
  ASSERT_EQ(t->gpus.size(), 1u);
  EXPECT_EQ(t->gpus[0].numa, 1);
  EXPECT_EQ(t->gpus[0].cpus, "8-15");
  ASSERT_EQ(t->nics.size(), 2u);
  EXPECT_EQ(t->nics[0].name, "mlx5_4");
  EXPECT_EQ(t->nics[0].kind, "rdma");
  ASSERT_EQ(t->nics[0].ports.size(), 2u);
  EXPECT_DOUBLE_EQ(t->nics[0].ports[1].rate_gbps, 400);
  EXPECT_EQ(t->nics[1].name, "0000:13:00.0");  // static: by class, named by address
  EXPECT_EQ(path_between(*t, t->gpus[0], t->nics[0]).distance, Distance::pix);
  ASSERT_EQ(t->notes.size(), 1u);
  EXPECT_NE(t->notes[0].find("without a PCI device"), std::string::npos);

  struct Case {
    std::string xml, needle;
  } cases[] = {
      {"<system><cpu numaid=\"x\"/></system>", "bad numaid 'x'"},
      {"<system><cpu affinity=\"zz\"/></system>", "bad CPU mask"},
      {"<system><cpu><pci class=\"0x030200\"/></cpu></system>", "<pci> without a busid"},
      {"<system><cpu><pci busid=\"0000:01:00.0\"/></cpu></system>", "without a class"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"GPU\"/></cpu></system>",
       "bad class 'GPU'"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\" vendor=\"nv\"/></cpu></system>",
       "bad vendor"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x030200\" "
       "link_width=\"-1\"/></cpu></system>",
       "bad link_width"},
      {"<system><cpu><pci busid=\"01:00\" class=\"0x030200\"/></cpu></system>", "bad PCI address"},
      {"<system><pci busid=\"0000:01:00.0\" class=\"0x030200\"/></system>",
       "directly under <system>"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x060400\"><pci busid=\"0000:02:00.0\" "
       "class=\"0x030200\"/><gpu/></pci></cpu></system>",
       "both PCI children and a <gpu>"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" "
       "class=\"0x030200\"><gpu/><nic/></pci></cpu></system>",
       "both a GPU and a NIC"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" "
       "class=\"0x020700\"><nic><net/></nic></pci></cpu></system>",
       "<net> without a name"},
      {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x020700\"/><pci busid=\"0000:01:00.0\" "
       "class=\"0x030200\"/></cpu></system>",
       "appears twice"},
      {"<topology version=\"2.0\"/>", "not an NCCL topology XML file"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.xml, Format::nccl_xml);
    ASSERT_FALSE(r.ok()) << "accepted: " << c.xml;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << "expected '" << c.needle << "', got: " << r.status().message();
  }
}

TEST(TopologyLoad, FormatDetectionAndFileErrors) {
  auto unknown = parse("<html/>");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown topology format"), std::string::npos);
  auto wrong = parse("<system/>", Format::hwloc_xml);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not an hwloc XML file"), std::string::npos);
  auto missing = load_file("/nonexistent/topo.xml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::not_found);
  EXPECT_NE(missing.status().message().find("/nonexistent/topo.xml"), std::string::npos);
  auto dir = load_file("/");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
  auto huge = parse(std::string(kMaxInputBytes + 1, ' '));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than the limit"), std::string::npos);
}

TEST(TopologyLoad, TooManyDevicesIsRefused) {
  std::string io;
  for (int bus = 0; bus < 256; ++bus)
    for (int d = 0; d < 3; ++d) {
      char addr[16];
      std::snprintf(addr, sizeof addr, "0000:%02x:%02x.0", bus, d);
      io += dev(addr, "0302 [10de:20b0] [10de:134f] a1");
    }
  auto t = parse(hwloc(host_bridge(io)));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("768 GPUs (more than 512)"), std::string::npos)
      << t.status().message();
}

}  // namespace
}  // namespace xport::topology
