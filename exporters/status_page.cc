// The status page: the node's totals and rates over time (small charts the page's own script
// draws as SVG from data in the page: no external asset), the GPU-NIC plan of every process,
// then one section per process (status_tables.cc). Reloads itself every 2 s.
#include "status_page.hpp"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/json.hpp"
#include "status_tables.hpp"
#include "xport/xport.hpp"

namespace xport::exporter {
namespace page {

using telemetry::BlockKind;
using telemetry::BlockSnapshot;
using telemetry::CounterId;
using telemetry::LabelKey;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), i == 0 ? "%.0f %s%s" : "%.2f %s%s", v, prefixes[i], unit);
  return buf;
}

std::string label(const BlockSnapshot& b, LabelKey k) {
  for (const auto& l : b.labels) {
    if (l.key == k) return l.value;
  }
  return "";
}

uint64_t value(const BlockSnapshot& b, CounterId id) {
  for (const auto& [i, v] : b.counters) {
    if (i == static_cast<uint16_t>(id)) return v;
  }
  return 0;
}

void chart(std::ostream& os, const std::string& title, const RateChart& c, const char* unit) {
  using xport::core::JsonGeneral;
  std::string data;
  xport::core::JsonWriter w(data);
  w.begin_object().field("title", title).field("unit", unit).begin_array("ages");
  for (double age : c.ages_s) w.value(JsonGeneral{age});
  w.end_array().begin_array("series");
  for (const auto& series : c.series) {
    w.begin_object().field("name", series.name).begin_array("values");
    for (double v : series.values) w.value(JsonGeneral{v});
    w.end_array().end_object();
  }
  w.end_array().end_object();
  os << "<figure class=chart data-chart=\"" << esc(data) << "\"><figcaption>" << esc(title)
     << (c.ages_s.size() < 2 ? " (rates after a few seconds)" : "") << "</figcaption></figure>\n";
}

namespace {

// Draws every figure.chart: axes, one polyline per series, a legend with the latest values.
// With #selftest in the address it also writes what it drew and measured into the body's
// data-selftest attribute (tests/exporter/status_page_test.py reads it from Chromium's DOM; an
// attribute, not an element: a node added after the charts left headless Chromium's screenshot
// blank) and does not reload.
constexpr const char* kScript = R"JS(
(function () {
  var colors = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf'];
  var NS = 'http://www.w3.org/2000/svg';
  function human(v, unit) {
    var p = ['', 'K', 'M', 'G', 'T', 'P'], i = 0;
    while (v >= 1000 && i < 5) { v /= 1000; i++; }
    return (i ? v.toFixed(2) : v.toFixed(0)) + ' ' + p[i] + unit;
  }
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  var drawn = 0, lines = 0;
  document.querySelectorAll('figure.chart').forEach(function (fig) {
    var d = JSON.parse(fig.dataset.chart);
    if (d.ages.length < 2) return;
    var W = 420, H = 120, L = 4, R = 4, T = 4, B = 16;
    var max = 0, span = d.ages[0] || 1;
    d.series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    if (max <= 0) max = 1;
    var svg = el('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img'});
    el('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: '#fafafa', stroke: '#ccc'}, svg);
    function x(age) { return L + (W - L - R) * (1 - age / span); }
    function y(v) { return T + (H - T - B) * (1 - v / max); }
    var top = el('text', {x: L + 4, y: T + 11, 'font-size': 10, fill: '#555'}, svg);
    top.textContent = human(max, d.unit);
    var left = el('text', {x: L, y: H - 4, 'font-size': 10}, svg);
    left.textContent = '-' + Math.round(span) + ' s';
    var right = el('text', {x: W - R, y: H - 4, 'text-anchor': 'end', 'font-size': 10}, svg);
    right.textContent = 'now';
    var legend = document.createElement('div');
    legend.className = 'legend';
    d.series.forEach(function (s, k) {
      var pts = s.values.map(function (v, i) { return x(d.ages[i]).toFixed(1) + ',' + y(v).toFixed(1); });
      el('polyline', {points: pts.join(' '), fill: 'none', stroke: colors[k % colors.length],
                      'stroke-width': 2}, svg);
      lines++;
      var item = document.createElement('span');
      item.style.color = colors[k % colors.length];
      item.textContent = s.name + ' ' + human(s.values[s.values.length - 1], '');
      legend.appendChild(item);
    });
    fig.insertBefore(svg, fig.firstChild);
    fig.appendChild(legend);
    fig.dataset.drawn = '1';
    drawn++;
  });
  if (location.hash.indexOf('selftest') >= 0) {
    // Cells whose text wraps take more than one line box.
    var wrapped = [];
    document.querySelectorAll('td').forEach(function (td) {
      var r = document.createRange();
      r.selectNodeContents(td);
      var tops = {};
      Array.prototype.forEach.call(r.getClientRects(), function (b) { tops[Math.round(b.top)] = 1; });
      if (Object.keys(tops).length > 1) wrapped.push(td.textContent);
    });
    document.body.setAttribute('data-selftest', JSON.stringify({
      charts: document.querySelectorAll('figure.chart').length, drawn: drawn, lines: lines,
      wrapped: wrapped, page_width: document.documentElement.scrollWidth,
      window_width: window.innerWidth}));
  } else {
    setTimeout(function () { location.reload(); }, 2000);
  }
})();
)JS";

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:1.5em}"
    "table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;"
    "padding:2px 8px;font-size:13px}th{background:#eee}td.n{text-align:right;"
    "font-family:monospace;white-space:nowrap}td,th{white-space:nowrap}"
    "section{border-top:2px solid #444;margin-top:1em}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px}figure.chart{margin:0}"
    "figcaption{font-size:12px;color:#444}.legend span{font-size:12px;margin-right:10px}";

// The node's totals over every process now on it.
void node_totals(std::ostream& os, const ScanResult& now, const RateChart& node) {
  uint64_t devices = 0, comms = 0, rails = 0, rails_up = 0, peers_lost = 0, quarantines = 0,
           rail_errors = 0, ep_errors = 0, registered = 0, staging_errors = 0, dropped = 0,
           routing = 0;
  double out = 0, in = 0;
  for (const auto& p : now.processes) {
    const ProcessTotals t = totals_of(p.snapshot);
    out += t.out_bytes;
    in += t.in_bytes;
    for (const auto& b : p.snapshot.blocks) {
      switch (static_cast<BlockKind>(b.kind)) {
        case BlockKind::process:
          dropped += value(b, CounterId::telemetry_blocks_dropped);
          break;
        case BlockKind::device:
          ++devices;
          comms += value(b, CounterId::device_comms_open);
          peers_lost += value(b, CounterId::device_peers_lost);
          registered += value(b, CounterId::device_registered_bytes);
          routing += value(b, CounterId::device_routing_misses);
          break;
        case BlockKind::rail:
          ++rails;
          rails_up += value(b, CounterId::rail_up) != 0;
          quarantines += value(b, CounterId::rail_quarantine_events);
          rail_errors += value(b, CounterId::rail_errors);
          break;
        case BlockKind::endpoint:
          ep_errors += value(b, CounterId::endpoint_error_completions);
          break;
        case BlockKind::gpu_staging:
          staging_errors += value(b, CounterId::gpu_staging_copy_errors);
          break;
        default:
          break;
      }
    }
  }
  auto latest = [&](size_t k) {
    return k < node.series.size() && !node.series[k].values.empty() ? node.series[k].values.back()
                                                                    : 0.0;
  };
  auto bad = [](uint64_t v) {
    return std::string(v ? "<td class=n style=\"color:#b00;font-weight:bold\">" : "<td class=n>") +
           std::to_string(v);
  };
  os << "<h2>Node totals</h2><div class=charts><table id=node-totals><tr><th>processes"
        "<th>devices<th>comms open<th>rails up<th>out/s<th>in/s<th>ops/s<th>sent<th>received"
        "<th>registered</tr>\n<tr><td class=n>"
     << now.processes.size() << "<td class=n>" << devices << "<td class=n>" << comms
     << (rails_up < rails ? "<td class=n style=\"color:#b00;font-weight:bold\">" : "<td class=n>")
     << rails_up << " of " << rails << "<td class=n>" << human(latest(0), "B") << "<td class=n>"
     << human(latest(1), "B") << "<td class=n>" << human(latest(2), "") << "<td class=n>"
     << human(out, "B") << "<td class=n>" << human(in, "B") << "<td class=n>"
     << human(static_cast<double>(registered), "B")
     << "</tr></table>\n<table id=node-failures><tr><th>error completions<th>rail errors"
        "<th>quarantines<th>peers lost<th>routing misses<th>staging copy errors"
        "<th>telemetry blocks dropped</tr>\n<tr>"
     << bad(ep_errors) << bad(rail_errors) << bad(quarantines) << bad(peers_lost) << bad(routing)
     << bad(staging_errors) << bad(dropped) << "</tr></table></div>\n";
}

// Which rail (NIC) carries which device's (GPU's) traffic, for every process of the node.
void plan_table(std::ostream& os, const ScanResult& now) {
  // (rail) -> provider, fabric, pci of the NIC, from xport_nic_info's blocks.
  std::map<std::string, std::tuple<std::string, std::string, std::string>> nics;
  for (const auto& p : now.processes) {
    for (const auto& b : p.snapshot.blocks) {
      if (b.kind == static_cast<uint16_t>(BlockKind::info) && value(b, CounterId::nic_info) != 0) {
        nics[label(b, LabelKey::rail)] = {label(b, LabelKey::provider), label(b, LabelKey::fabric),
                                          label(b, LabelKey::pci)};
      }
    }
  }
  os << "<h2>GPU-NIC plan</h2><table id=plan><tr><th>pid<th>job<th>device<th>GPU<th>rail"
        "<th>NIC<th>role<th>provider<th>fabric<th>NIC PCI</tr>\n";
  size_t rows = 0;
  for (const auto& p : now.processes) {
    for (const auto& b : p.snapshot.blocks) {
      if (b.kind != static_cast<uint16_t>(BlockKind::info) ||
          value(b, CounterId::rail_plan_info) == 0) {
        continue;
      }
      const std::string rail = label(b, LabelKey::rail), gpu = label(b, LabelKey::gpu);
      const auto nic = nics.count(rail) ? nics[rail] : std::make_tuple("", "", "");
      os << "<tr><td class=n>" << p.snapshot.pid << "<td>" << esc(p.job) << "<td class=n>"
         << esc(label(b, LabelKey::device)) << "<td>" << (gpu.empty() ? "host (no GPU)" : esc(gpu))
         << "<td>" << esc(rail) << "<td>" << esc(label(b, LabelKey::nic)) << "<td>"
         << esc(label(b, LabelKey::role)) << "<td>" << esc(std::get<0>(nic)) << "<td>"
         << esc(std::get<1>(nic)) << "<td>"
         << esc(std::get<2>(nic).empty() ? "-" : std::get<2>(nic)) << "</tr>\n";
      ++rows;
    }
  }
  if (rows == 0) os << "<tr><td colspan=10>no process has published its plan</tr>\n";
  os << "</table>\n";
}

}  // namespace
}  // namespace page

std::string status_page(const ScanResult& now, const std::deque<ScanResult>& history,
                        const NodeScan& node, const RateHistory& rates, const std::string& host) {
  using page::esc;
  std::ostringstream os;
  os << "<!DOCTYPE html><html><head><meta charset=utf-8>"
        "<noscript><meta http-equiv=refresh content=2></noscript>"
        "<title>xport-exporter on "
     << esc(host) << "</title><style>" << page::kStyle << "</style></head><body>\n"
     << "<h1>xport-exporter on " << esc(host) << "</h1>\n<p>libxport " << esc(version()) << ": "
     << now.processes.size() << " process" << (now.processes.size() == 1 ? "" : "es")
     << " publishing in " << esc(node.options().dir)
     << ". Metrics: <a href=\"/metrics\">/metrics</a>. Segments rejected:";
  for (const auto& [reason, n] : node.rejected()) os << " " << reason << " " << n;
  os << "; removed (dead) " << node.removed() << ".</p>\n";
  const RateChart totals = rates.node();
  page::node_totals(os, now, totals);
  RateChart bytes = totals, ops = totals;
  bytes.series.resize(2);                                        // out, in
  ops.series.erase(ops.series.begin(), ops.series.begin() + 2);  // ops/s, errors/s
  os << "<div class=charts>\n";
  page::chart(os, "node throughput", bytes, "B/s");
  page::chart(os, "node operations and errors", ops, "/s");
  page::chart(os, "throughput per rail (out + in)", rates.rails(), "B/s");
  os << "</div>\n";
  page::plan_table(os, now);
  if (now.processes.empty()) os << "<p><b>No process is publishing counters.</b></p>\n";
  for (const auto& p : now.processes) {
    const ProcessView* prev = nullptr;
    for (auto scan = history.begin(); scan != history.end() && prev == nullptr; ++scan) {
      for (const auto& q : scan->processes) {
        if (q.snapshot.pid == p.snapshot.pid && q.snapshot.start_ticks == p.snapshot.start_ticks &&
            q.snapshot.publish_time_ns < p.snapshot.publish_time_ns) {
          prev = &q;
        }
      }
    }
    page::process_section(os, p, prev, rates);
  }
  os << "<script>" << page::kScript << "</script></body></html>\n";
  return os.str();
}

}  // namespace xport::exporter
