package enforcer

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rlctl/rlctl/engine"
)

// Decision label values of rate_limit_requests_total.
const (
	decisionOK        = "ok"          // admitted, under the limit (or no rule)
	decisionOverLimit = "over_limit"  // rejected
	decisionShadow    = "shadow_over" // over the limit in shadow: admitted, counted
	decisionSoft      = "soft_over"   // over the limit in soft (or canary off its share): admitted with a warning
)

// Bypass reasons of rate_limit_bypassed_total.
const (
	bypassCircuitOpen = "redis_circuit_open" // the breaker is open
	bypassStoreError  = "store_error"        // a store call failed or timed out
)

// metrics are one Enforcer's Prometheus collectors, on a registry of its own so that tests can
// run several enforcers in one process.
type metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec   // domain, rule, decision
	shadowBlocks *prometheus.CounterVec   // domain, rule
	bypassed     *prometheus.CounterVec   // reason, domain, rule
	storeCalls   *prometheus.CounterVec   // op, result
	storeLatency *prometheus.HistogramVec // op
	leaseSize    prometheus.Histogram
	breaker      prometheus.Gauge
	breakerTrans *prometheus.CounterVec // to
	configVer    prometheus.Gauge
	configInfo   *prometheus.GaugeVec // version
	reloads      *prometheus.CounterVec
	invalid      *prometheus.CounterVec // reason
	journalDrops prometheus.CounterFunc
	inflight     prometheus.GaugeFunc
}

// newMetrics registers the collectors. journalDropped and inflight are read at each scrape, so
// that the request path only counts in an atomic of its own.
func newMetrics(journalDropped, inflight func() float64) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_requests_total",
		Help: "Descriptors decided, by domain, rule (\"\" when none matched) and decision (ok, over_limit, shadow_over, soft_over).",
	}, []string{"domain", "rule", "decision"})
	m.shadowBlocks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_shadow_block_total",
		Help: "Requests a shadow-stage rule would have rejected (RateLimitShadowBlock events).",
	}, []string{"domain", "rule"})
	m.bypassed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_bypassed_total",
		Help: "Requests admitted without the store's say because it was unavailable, by reason (redis_circuit_open, store_error).",
	}, []string{"reason", "domain", "rule"})
	m.storeCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_store_calls_total",
		Help: "Store calls by op (take, return) and result (granted, denied, error, timeout, circuit_open).",
	}, []string{"op", "result"})
	m.storeLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rate_limit_store_call_seconds",
		Help:    "Latency of store calls by op.",
		Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3},
	}, []string{"op"})
	m.leaseSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rate_limit_lease_tokens",
		Help:    "Tokens granted per store take (lease size); its _count is the number of lease takes.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000},
	})
	m.breaker = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rate_limit_breaker_state",
		Help: "Store circuit breaker: 0 closed, 1 half-open, 2 open.",
	})
	m.breakerTrans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_breaker_transitions_total",
		Help: "Circuit breaker state changes, by the state entered.",
	}, []string{"to"})
	m.configVer = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rate_limit_config_loaded_timestamp_seconds",
		Help: "When the serving snapshot was loaded.",
	})
	m.configInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rate_limit_config_info",
		Help: "1 for the snapshot version being served: its content_hash, as rlctl render writes it.",
	}, []string{"version"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_config_reloads_total",
		Help: "Snapshot reloads by result (ok, error). A rejected file leaves the old config serving.",
	}, []string{"result"})
	m.invalid = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_invalid_requests_total",
		Help: "ShouldRateLimit calls rejected with InvalidArgument, by reason (empty_domain, no_descriptors, empty_descriptor, empty_key, too_large, bad_override, unsupported).",
	}, []string{"reason"})
	m.journalDrops = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "rate_limit_journal_dropped_total",
		Help: "Journal records dropped because the journal writer fell behind.",
	}, journalDropped)
	m.inflight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_inflight_requests",
		Help: "ShouldRateLimit calls in progress.",
	}, inflight)
	m.reg.MustRegister(m.requests, m.shadowBlocks, m.bypassed, m.storeCalls, m.storeLatency,
		m.leaseSize, m.breaker, m.breakerTrans, m.configVer, m.configInfo, m.reloads, m.invalid,
		m.journalDrops, m.inflight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Series with known label values start at 0, so that a dashboard or an alert on rate() sees
	// them before the first event. (Per-rule series start when a rule is compiled; the store's
	// when the store is wrapped, see newGuardedStore.)
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	for _, r := range invalidReasons {
		m.invalid.WithLabelValues(r)
	}
	for _, s := range []BreakerState{BreakerClosed, BreakerHalfOpen, BreakerOpen} {
		m.breakerTrans.WithLabelValues(s.String())
	}
	return m
}

// trackKeys registers the key-cap gauges of c: the keys tracked now, the bound, and the
// evictions so far (rate_limit_tracked_keys, rate_limit_tracked_keys_max,
// rate_limit_key_evictions_total).
func (m *metrics) trackKeys(c *engine.KeyCap) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rate_limit_tracked_keys",
			Help: "Keys this instance holds local lease state for (at most --max-keys, briefly more while first takes are in flight).",
		}, func() float64 { return float64(c.Tracked()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rate_limit_tracked_keys_max",
			Help: "The bound on tracked keys (--max-keys).",
		}, func() float64 { return float64(c.Max()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rate_limit_key_evictions_total",
			Help: "Leases evicted to stay within --max-keys; their unspent tokens went back to the store.",
		}, func() float64 { return float64(c.Evicted()) }),
	)
}
