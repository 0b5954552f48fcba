package controlplane

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rlctl/rlctl/xds"
)

// metrics are one Server's Prometheus collectors, on a registry of its own so that tests can run
// several servers in one process.
type metrics struct {
	reg      *prometheus.Registry
	loads    *prometheus.CounterVec // result
	lastOK   prometheus.Gauge
	pushes   *prometheus.CounterVec // type_url
	nacks    *prometheus.CounterVec // type_url
	clients  prometheus.Gauge
	info     *prometheus.GaugeVec // type_url, version
	loadedAt prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.loads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlctl_xds_policy_loads_total",
		Help: "Loads of the policy directory after a change or a resync, by result: served (a new version), unchanged (the same policy), refused (it does not load; the last good version keeps being served).",
	}, []string{"result"})
	m.lastOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rlctl_xds_policy_last_load_successful",
		Help: "1 when the policy directory loaded at its last load (served or unchanged), 0 when that load was refused and the last good version is being served.",
	})
	m.lastOK.Set(1) // Start refuses a directory that does not load
	m.pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlctl_xds_pushes_total",
		Help: "Discovery responses sent to clients, by resource type URL.",
	}, []string{"type_url"})
	m.nacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rlctl_xds_nacks_total",
		Help: "Versions a client rejected (NACK), by resource type URL.",
	}, []string{"type_url"})
	m.clients = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rlctl_xds_connected_clients",
		Help: "xDS streams open (an enforcer or envoyproxy/ratelimit instance each).",
	})
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rlctl_xds_version_info",
		Help: "1 for the version served of each resource type URL: the snapshot's content_hash, and a hash of the RateLimitConfigs.",
	}, []string{"type_url", "version"})
	m.loadedAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rlctl_xds_version_loaded_timestamp_seconds",
		Help: "When the version being served was loaded.",
	})
	m.reg.MustRegister(m.loads, m.lastOK, m.pushes, m.nacks, m.clients, m.info, m.loadedAt,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"served", "unchanged", "refused"} {
		m.loads.WithLabelValues(r)
	}
	for _, t := range []string{xds.SnapshotTypeURL, xds.RateLimitConfigTypeURL} {
		m.pushes.WithLabelValues(t)
		m.nacks.WithLabelValues(t)
	}
	return m
}

// served moves the version info from old's versions (nil at start) to r's.
func (m *metrics) served(old, r *resources) {
	if old != nil {
		for t, tr := range old.byType {
			m.info.DeleteLabelValues(t, tr.version)
		}
	}
	for t, tr := range r.byType {
		m.info.WithLabelValues(t, tr.version).Set(1)
	}
	m.loadedAt.SetToCurrentTime()
}
