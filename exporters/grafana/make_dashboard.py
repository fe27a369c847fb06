#!/usr/bin/env python3
"""Writes exporters/grafana/xport.json, the Grafana dashboard of xport-exporter's metrics
(docs/metrics.md): run it after changing a panel. Every query selects and groups by the scrape
target's `instance` (the node) so a fleet's nodes stay apart, with variables for the scrape
job, the instance, the process's job (xport_job) and rank. tests/exporter/grafana_test.py checks
the result; tests/exporter/fleet_test.py runs every query against two exporters in Prometheus."""
import json
import pathlib
import sys

# An argument writes elsewhere (the test compares that with the file in the repository).
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else \
    pathlib.Path(__file__).resolve().parent / "xport.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
# Library series: the target's job and instance, the process's job and rank.
S = 'job=~"$job", instance=~"$instance", xport_job=~"$xport_job", rank=~"$rank"'
# The exporter's own series: the target's labels only.
E = 'job=~"$job", instance=~"$instance"'
PROC = "instance, xport_job, rank, process"  # one process of the fleet
WHO = "{{instance}} {{xport_job}} r{{rank}} p{{process}}"
RATE = "[$__rate_interval]"


def rate(metric, sel=S):
    return f"rate({metric}{{{sel}}}{RATE})"


class Board:
    def __init__(self):
        self.panels, self.y, self.x, self.next_id = [], 0, 0, 1

    def row(self, title):
        if self.x:
            self.y, self.x = self.y + 8, 0
        self.panels.append({"id": 100 + len(self.panels), "type": "row", "title": title,
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1},
                            "collapsed": False, "panels": []})
        self.y += 1

    def panel(self, title, description, targets, unit="short", kind="timeseries", w=12):
        if self.x + w > 24:
            self.y, self.x = self.y + 8, 0
        p = {"id": self.next_id, "type": kind, "title": title, "description": description,
             "datasource": DS, "gridPos": {"x": self.x, "y": self.y, "w": w, "h": 8},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                    "calcs": ["mean", "max"]}} if kind == "timeseries" else {},
             "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": e,
                          "legendFormat": legend} for i, (e, legend) in enumerate(targets)]}
        if kind == "table":
            p["targets"] = [dict(t, format="table", instant=True) for t in p["targets"]]
        self.panels.append(p)
        self.next_id += 1
        self.x += w
        if self.x >= 24:
            self.y, self.x = self.y + 8, 0


def variable(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query, "includeAll": True,
            "multi": True, "allValue": ".*", "current": {}, "refresh": 2, "hide": 0, "sort": 1}


b = Board()
b.row("Nodes")
b.panel("Throughput per node (bytes/s)", "Payload bytes of every op of every process on each "
        "node (send, recv, write, read, atomic).",
        [(f"sum by (instance) ({rate('xport_endpoint_bytes_total')})", "{{instance}}")], "Bps")
b.panel("Processes and devices per node", "Processes publishing counters and their devices, "
        "per node; the exporter's scrape time.",
        [(f"count by (instance) (xport_process_info{{{S}}})", "{{instance}} processes"),
         (f"sum by (instance) (xport_process_devices{{{S}}})", "{{instance}} devices"),
         (f"max by (instance) (xport_exporter_scrape_duration_seconds{{{E}}})",
          "{{instance}} scrape seconds")])
b.panel("Rails down per node", "Rails not up (quarantined or failed), per node: 0 is healthy.",
        [(f"sum by (instance) (1 - xport_rail_up{{{S}}})", "{{instance}}")])
b.panel("Failures per node (over the time range)", "Peers lost, rail quarantines, rail error "
        "completions, routing misses, GPU staging copy errors and telemetry blocks dropped, per "
        "node, over the dashboard's time range: all should be 0.",
        [(f"sum by (instance) (increase(xport_device_peers_lost_total{{{S}}}[$__range]))",
          "{{instance}} peers lost"),
         (f"sum by (instance) (increase(xport_rail_quarantine_events_total{{{S}}}[$__range]))",
          "{{instance}} rail quarantines"),
         (f"sum by (instance) (increase(xport_rail_error_completions_total{{{S}}}[$__range]))",
          "{{instance}} rail error completions"),
         (f"sum by (instance) (increase(xport_device_routing_misses_total{{{S}}}[$__range]))",
          "{{instance}} routing misses"),
         (f"sum by (instance) (increase(xport_gpu_staging_copy_errors_total{{{S}}}[$__range]))",
          "{{instance}} staging copy errors"),
         (f"sum by (instance) (increase(xport_telemetry_blocks_dropped_total{{{S}}}[$__range]))",
          "{{instance}} telemetry blocks dropped")], kind="table")

b.row("Rails")
b.panel("Per-rail throughput per GPU (bytes/s)", "Payload bytes of every op, by process, "
        "device (GPU) and rail.",
        [(f"sum by ({PROC}, device, gpu, rail) ({rate('xport_endpoint_bytes_total')})",
          f"{WHO} dev {{{{device}}}} {{{{gpu}}}} -> {{{{rail}}}}")], "Bps")
b.panel("Rail balance (share of each node's traffic per rail)", "Each rail's share of its "
        "node's bytes: even rails mean even striping.",
        [(f"sum by (instance, rail) ({rate('xport_endpoint_bytes_total')}) / ignoring(rail) "
          f"group_left sum by (instance) ({rate('xport_endpoint_bytes_total')})",
          "{{instance}} {{rail}}")], "percentunit")
b.panel("Per-rail throughput by op (bytes/s)", "Bytes per node, rail and op.",
        [(f"sum by (instance, rail, op) ({rate('xport_endpoint_bytes_total')})",
          "{{instance}} {{rail}} {{op}}")], "Bps")
b.panel("Rail state: NICs and plan", "xport_rail_up per rail (1 up, 0 quarantined), which rail "
        "serves which device/GPU, and the NICs' provider and PCI address.",
        [(f"min by ({PROC}, device, rail) (xport_rail_up{{{S}}})",
          f"up {WHO} dev {{{{device}}}} {{{{rail}}}}"),
         (f"max by ({PROC}, device, gpu, rail, nic, role) (xport_rail_plan_info{{{S}}})",
          f"{WHO} dev {{{{device}}}} {{{{rail}}}} ({{{{nic}}}}) {{{{role}}}}"),
         (f"max by (instance, rail, nic, provider, fabric, pci) (xport_nic_info{{{S}}})",
          "{{instance}} {{rail}} {{provider}} {{pci}}")], kind="table")
b.panel("Striped writes per rail (/s)", "Stripes of large messages and puts sent and landed.",
        [(f"sum by (instance, rail) ({rate('xport_rail_stripes_out_total')})",
          "{{instance}} out {{rail}}"),
         (f"sum by (instance, rail) ({rate('xport_rail_stripes_in_total')})",
          "{{instance}} in {{rail}}")])
b.panel("Operations/s by rail and op", "Operations per node, rail and op.",
        [(f"sum by (instance, rail, op) ({rate('xport_endpoint_ops_total')})",
          "{{instance}} {{rail}} {{op}}")], "ops")

b.row("Errors and failures")
b.panel("Error rates", "Error completions per rail and CQ, rail errors, routing misses.",
        [(f"sum by ({PROC}, device, rail) ({rate('xport_endpoint_error_completions_total')})",
          f"error completions {WHO} dev {{{{device}}}} {{{{rail}}}}"),
         (f"sum by ({PROC}, device, rail) ({rate('xport_rail_error_completions_total')})",
          f"rail errors {WHO} dev {{{{device}}}} {{{{rail}}}}"),
         (f"sum by ({PROC}, device, cq) ({rate('xport_cq_error_completions_total')})",
          f"CQ errors {WHO} dev {{{{device}}}} {{{{cq}}}}"),
         (f"sum by ({PROC}, device) ({rate('xport_device_routing_misses_total')})",
          f"routing misses {WHO} dev {{{{device}}}}")])
b.panel("Peers lost and rail quarantines (/s)", "Peers declared lost (silent or unreachable) and "
        "rails quarantined for a link down, per process.",
        [(f"sum by ({PROC}, device) ({rate('xport_device_peers_lost_total')})",
          f"peers lost {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device, rail) ({rate('xport_rail_quarantine_events_total')})",
          f"quarantines {WHO} dev {{{{device}}}} {{{{rail}}}}")])
b.panel("EAGAIN retries/s by rail", "Posts the provider refused for now, retried.",
        [(f"sum by ({PROC}, device, rail) ({rate('xport_endpoint_eagain_retries_total')})",
          f"{WHO} dev {{{{device}}}} {{{{rail}}}}")])
b.panel("Telemetry and staging failures (/s)", "Counter blocks a full segment left out, and GPU "
        "staging copies the driver refused.",
        [(f"sum by ({PROC}) ({rate('xport_telemetry_blocks_dropped_total')})",
          f"blocks dropped {WHO}"),
         (f"sum by ({PROC}, cuda_device) ({rate('xport_gpu_staging_copy_errors_total')})",
          f"staging copy errors {WHO} gpu {{{{cuda_device}}}}")])

b.row("Memory")
b.panel("Registered bytes", "Bytes of live registrations per device, the pool's bounce "
        "buffers, and GPU staging shadows.",
        [(f"sum by ({PROC}, device) (xport_device_registered_bytes{{{S}}})",
          f"regions {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device) (xport_pool_registered_bytes{{{S}}})",
          f"pool buffers {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, cuda_device) (xport_gpu_staging_shadow_bytes{{{S}}})",
          f"staging shadows {WHO} gpu {{{{cuda_device}}}}")], "bytes")
b.panel("MR cache hit ratio", "register_memory calls served by a live registration.",
        [(f"sum by ({PROC}) ({rate('xport_device_mr_cache_hits_total')}) / (sum by ({PROC}) "
          f"({rate('xport_device_mr_cache_hits_total')}) + sum by ({PROC}) "
          f"({rate('xport_device_mr_cache_misses_total')}))", WHO)], "percentunit")

b.row("Sharing and completion queues")
b.panel("Pool sharing: communicators per channel", "Communicators attached per channel, and "
        "the comms open.",
        [(f"sum by ({PROC}, device) (xport_pool_comms_attached{{{S}}}) / on({PROC}, device) "
          f"sum by ({PROC}, device) (xport_pool_channels{{{S}}})", f"{WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device) (xport_device_comms_open{{{S}}})",
          f"comms open {WHO} dev {{{{device}}}}")])
b.panel("CQ poll efficiency (non-empty polls)", "Share of polls that found completions.",
        [(f"1 - sum by ({PROC}, device, cq) ({rate('xport_cq_empty_polls_total')}) / "
          f"sum by ({PROC}, device, cq) ({rate('xport_cq_polls_total')})",
          f"{WHO} dev {{{{device}}}} {{{{cq}}}}")], "percentunit")
b.panel("CQ completions/s and largest batch", "Completions read and the largest batch.",
        [(f"sum by ({PROC}, device, cq) ({rate('xport_cq_completions_total')})",
          f"{WHO} dev {{{{device}}}} {{{{cq}}}} completions/s"),
         (f"max by ({PROC}, device, cq) (xport_cq_max_batch{{{S}}})",
          f"{WHO} dev {{{{device}}}} {{{{cq}}}} max batch")])

b.row("Channel pool")
b.panel("Pool channels and CQs", "Channels and CQs open, and the groups x channels in effect.",
        [(f"sum by ({PROC}, device) (xport_pool_channels{{{S}}})",
          f"channels {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device) (xport_pool_cqs{{{S}}})", f"CQs {WHO} dev {{{{device}}}}"),
         (f"max by ({PROC}, device) (xport_pool_groups{{{S}}} * on({PROC}, device) "
          f"xport_pool_channels_per_group{{{S}}})",
          f"groups x channels/group {WHO} dev {{{{device}}}}")])
b.panel("Pool comms attached (and per channel)", "Communicators attached, and per channel.",
        [(f"sum by ({PROC}, device) (xport_pool_comms_attached{{{S}}})",
          f"comms attached {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device) (xport_pool_comms_attached{{{S}}}) / on({PROC}, device) "
          f"sum by ({PROC}, device) (xport_pool_channels{{{S}}})",
          f"comms per channel {WHO} dev {{{{device}}}}")])
b.panel("Pool primaries vs secondaries (/s)", "Communicators that opened a channel and those "
        "that joined one.",
        [(f"sum by ({PROC}, device) ({rate('xport_pool_primaries_total')})",
          f"primaries {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device) ({rate('xport_pool_secondaries_total')})",
          f"secondaries {WHO} dev {{{{device}}}}")])
b.panel("Pool routing misses (must stay 0)", "Completions or messages for no known "
        "communicator: must stay 0.",
        [(f"sum by ({PROC}, device) (xport_pool_routing_misses_total{{{S}}})",
          f"{WHO} dev {{{{device}}}}")], kind="stat")
b.panel("Pool ops per channel", "Operations per channel (mean) and on the busiest channel.",
        [(f"sum by ({PROC}, device) ({rate('xport_pool_channel_ops_total')}) / on({PROC}, device) "
          f"sum by ({PROC}, device) (xport_pool_channels{{{S}}})",
          f"ops/s per channel {WHO} dev {{{{device}}}}"),
         (f"sum by ({PROC}, device) (xport_pool_channel_ops_total{{{S}}}) / on({PROC}, device) "
          f"sum by ({PROC}, device) (xport_pool_channels{{{S}}})",
          f"ops per channel (mean) {WHO} dev {{{{device}}}}"),
         (f"max by ({PROC}, device) (xport_pool_busiest_channel_ops{{{S}}})",
          f"busiest channel ops {WHO} dev {{{{device}}}}")])

b.row("GPU (staging and proxy)")
b.panel("GPU staging (bytes/s)", "Bytes copied between GPU memory and host shadows.",
        [(f"sum by ({PROC}, cuda_device) ({rate('xport_gpu_staging_to_host_bytes_total')})",
          f"{WHO} gpu {{{{cuda_device}}}} to host"),
         (f"sum by ({PROC}, cuda_device) ({rate('xport_gpu_staging_to_gpu_bytes_total')})",
          f"{WHO} gpu {{{{cuda_device}}}} to GPU")], "Bps")
b.panel("GPU proxy descriptors (/s) and ring occupancy", "Descriptors taken, ring occupancy, "
        "and aborts (timeouts, failures).",
        [(f"sum by ({PROC}, proxy) ({rate('xport_gpu_proxy_descriptors_total')})",
          f"{WHO} proxy {{{{proxy}}}} descriptors/s"),
         (f"sum by ({PROC}, proxy) (xport_gpu_proxy_ring_queued{{{S}}} + "
          f"xport_gpu_proxy_in_flight{{{S}}})", f"{WHO} proxy {{{{proxy}}}} occupancy"),
         (f"sum by ({PROC}, proxy) (xport_gpu_proxy_timeouts_total{{{S}}} + "
          f"xport_gpu_proxy_failures_total{{{S}}})", f"{WHO} proxy {{{{proxy}}}} aborts")])

b.row("Exporters")
b.panel("Exporter: segments and rejections", "Live segments, rejections by reason, series "
        "dropped, dead segments removed, per node.",
        [(f"sum by (instance) (xport_exporter_segments{{{E}}})", "{{instance}} live segments"),
         (f"sum by (instance, reason) (rate(xport_exporter_segments_rejected_total{{{E}}}{RATE}))",
          "{{instance}} rejected {{reason}}"),
         (f"sum by (instance, reason) (rate(xport_exporter_series_dropped_total{{{E}}}{RATE}))",
          "{{instance}} series dropped {{reason}}"),
         (f"sum by (instance) (rate(xport_exporter_segments_removed_total{{{E}}}{RATE}))",
          "{{instance}} removed (dead)")])
b.panel("Exporter versions", "Each node's exporter: libxport version, git revision, libfabric.",
        [(f"max by (instance, version, revision, libfabric) (xport_build_info{{{E}}})",
          "{{instance}} {{version}} {{revision}} libfabric {{libfabric}}")], kind="table")

dash = {
    "__inputs": [],
    "annotations": {"list": []},
    "description": "libxport across a fleet: per node and per process throughput, rail balance "
                   "and state, failures (peers lost, rail quarantines and errors, staging copy "
                   "errors, telemetry blocks dropped), registered memory, the channel pool, CQ "
                   "efficiency (xport-exporter, docs/metrics.md; scrape with honor_labels: false)",
    "editable": True,
    "graphTooltip": 1,
    "panels": b.panels,
    "refresh": "10s",
    "schemaVersion": 38,
    "style": "dark",
    "tags": ["xport", "rdma", "libfabric"],
    "templating": {"list": [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1},
        variable("job", "scrape job", "label_values(xport_build_info, job)"),
        variable("instance", "node", 'label_values(xport_build_info{job=~"$job"}, instance)'),
        variable("xport_job", "job (XPORT_JOB)",
                 'label_values(xport_process_info{job=~"$job", instance=~"$instance"}, xport_job)'),
        variable("rank", "rank", 'label_values(xport_process_info{job=~"$job", '
                 'instance=~"$instance", xport_job=~"$xport_job"}, rank)'),
    ]},
    "time": {"from": "now-30m", "to": "now"},
    "timepicker": {},
    "timezone": "",
    "title": "xport: nodes, rails, pools, CQs",
    "uid": "xport-rails",
    "version": 2,
}
OUT.write_text(json.dumps(dash, indent=2) + "\n")
print(f"{OUT}: {sum(p['type'] != 'row' for p in b.panels)} panels")
