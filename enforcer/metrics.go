package enforcer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// Decision label values of rate_limit_requests_total.
const (
	decisionOK        = "ok"          // admitted, under the limit (or no rule)
	decisionOverLimit = "over_limit"  // rejected
	decisionShadow    = "shadow_over" // over the limit in shadow: admitted, counted
	decisionSoft      = "soft_over"   // over the limit in soft (or canary off its share): admitted with a warning
	// The store was unavailable and the rule fails closed: denied at enforce, admitted with a
	// warning at soft, admitted at shadow, and counted apart from the limit's decisions.
	decisionFailedClosed = "failed_closed"
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
	reloadOK     prometheus.Gauge
	invalid      *prometheus.CounterVec // reason
	invalidUTF8  prometheus.Counter
	unknown      *unknownDomains
	journalDrops prometheus.CounterFunc
	inflight     prometheus.GaugeFunc
}

// newMetrics registers the collectors. journalDropped and inflight are read at each scrape, so
// that the request path only counts in an atomic of its own.
func newMetrics(journalDropped, inflight func() float64) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_requests_total",
		Help: "Descriptors decided, by domain, rule (\"\" when none matched) and decision (ok, over_limit, shadow_over, soft_over, or failed_closed: " +
			"the store was unavailable and the rule fails closed, which denies at the enforce stage).",
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
		Help: "Store calls by op and result: take granted, denied, error, timeout, circuit_open or canceled (the caller hung up " +
			"first: no failure of the store), and late, the timeouts whose reply came after the request stopped waiting (counted in " +
			"timeout too: a sum over result counts them twice); return ok or error.",
	}, []string{"op", "result"})
	m.storeLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rate_limit_store_call_seconds",
		Help:    "The store's own time for each call, by op: a take that outlived the request's wait counts until its reply or its own deadline.",
		Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3},
	}, []string{"op"})
	m.leaseSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rate_limit_lease_tokens",
		Help:    "Tokens granted per store take (lease size); its _count is the number of takes that granted tokens.",
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
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rate_limit_config_last_reload_successful",
		Help: "0 when the last snapshot the enforcer was asked to load was rejected (the previous config " +
			"keeps serving until a good one loads), else 1.",
	})
	m.reloadOK.Set(1) // nothing rejected yet: waiting for a first snapshot over xDS is not a failure
	m.invalid = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_invalid_requests_total",
		Help: "ShouldRateLimit calls rejected with InvalidArgument, by reason (empty_domain, no_descriptors, empty_descriptor, empty_key, too_large, bad_override, unsupported).",
	}, []string{"reason"})
	m.invalidUTF8 = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rate_limit_invalid_utf8_requests_total",
		Help: "ShouldRateLimit calls whose strings held bytes that are not UTF-8, which gRPC's decoder refuses " +
			"(a filter that fails open would then admit the request unchecked): decided with each such byte read as U+FFFD.",
	})
	unknown := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_unknown_domain_total",
		Help: "ShouldRateLimit calls naming a domain no loaded policy defines, answered OK without limiting, by domain " +
			"(the first 100 names seen; the calls of any other as \"_other\").",
	}, []string{"domain"})
	m.unknown = newUnknownDomains(unknown)
	m.journalDrops = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "rate_limit_journal_dropped_total",
		Help: "Journal records lost: dropped because the journal writer fell behind, or not written because the disk refused them.",
	}, journalDropped)
	m.inflight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_inflight_requests",
		Help: "ShouldRateLimit calls in progress.",
	}, inflight)
	m.reg.MustRegister(m.requests, m.shadowBlocks, m.bypassed, m.storeCalls, m.storeLatency,
		m.leaseSize, m.breaker, m.breakerTrans, m.configVer, m.configInfo, m.reloads, m.reloadOK, m.invalid, m.invalidUTF8, unknown,
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

// forget deletes the series of the domains and rules of stale that keep does not serve: a rule
// that a reload removed, or one compiled for a snapshot that was then rejected, must not be
// exported at its last counts until the process restarts. A rule that comes back starts its
// series again at 0, which rate() reads as a counter reset. keep may be nil (nothing serving).
// A request still deciding on the old config when its rule's series go counts in a series no
// longer exported.
func (m *metrics) forget(stale *policy.Model, keep *runtimeConfig) {
	vecs := []*prometheus.CounterVec{m.requests, m.shadowBlocks, m.bypassed}
	drop := func(labels prometheus.Labels) {
		for _, v := range vecs {
			v.DeletePartialMatch(labels)
		}
	}
	for _, d := range stale.Domains {
		if d == nil {
			continue
		}
		var kept *domainState
		if keep != nil {
			kept = keep.domains[d.Name]
		}
		if kept == nil {
			drop(prometheus.Labels{"domain": d.Name})
			continue
		}
		for _, r := range d.Rules {
			if r != nil && !kept.has(r.Name) {
				drop(prometheus.Labels{"domain": d.Name, "rule": r.Name})
			}
		}
	}
}

// trackKeys registers the key-cap gauges of c: the keys tracked now, the bound, and the
// evictions so far (rate_limit_tracked_keys, rate_limit_tracked_keys_max,
// rate_limit_key_evictions_total).
func (m *metrics) trackKeys(c *engine.KeyCap, fallback *engine.Memory) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rate_limit_fallback_evictions_total",
			Help: "Fail-open fallback buckets evicted to stay within --max-keys while the store is unavailable; the key's next request starts a fresh bucket.",
		}, func() float64 { return float64(fallback.Evicted()) }),
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

// Unknown domains: a call naming a domain no policy defines is answered OK, as
// envoyproxy/ratelimit answers it, so a misspelt domain in Envoy's config turns limiting off.
// It is counted in rate_limit_unknown_domain_total and logged, so that it is seen.
const (
	// maxUnknownDomains bounds the domain label's values: a caller choosing domain names must
	// not grow the metric without bound. The first names seen keep their own series.
	maxUnknownDomains = 100
	// otherDomain is the label value of every unknown domain beyond the first maxUnknownDomains.
	otherDomain = "_other"
	// unknownDomainLogMs is the least time between two log lines of one domain (of
	// otherDomain, for the names counted there); the calls in between are counted in the next
	// line's "suppressed".
	unknownDomainLogMs = 60_000
)

// unknownDomains counts and logs calls naming unknown domains. It is safe for concurrent use.
type unknownDomains struct {
	vec   *prometheus.CounterVec
	other *unknownDomain
	full  atomic.Bool // byName holds maxUnknownDomains names: a new one goes to other

	mu     sync.RWMutex
	byName map[string]*unknownDomain
}

// unknownDomain is one series of rate_limit_unknown_domain_total and the state of its log.
type unknownDomain struct {
	label      string
	calls      prometheus.Counter
	lastLog    atomic.Int64 // Unix ms of the last log line; 0 before the first
	suppressed atomic.Int64 // calls not logged since the last line
}

// newUnknownDomains returns the tracker of vec. The otherDomain series starts at 0, so that an
// alert on it or on the metric works before the first unknown domain.
func newUnknownDomains(vec *prometheus.CounterVec) *unknownDomains {
	return &unknownDomains{vec: vec, byName: map[string]*unknownDomain{},
		other: &unknownDomain{label: otherDomain, calls: vec.WithLabelValues(otherDomain)}}
}

// see counts a call naming domain, which no policy defines, at nowMs, and logs it unless the
// domain's series was logged less than unknownDomainLogMs ago.
func (u *unknownDomains) see(domain string, nowMs int64, log *slog.Logger) {
	u.mu.RLock()
	d := u.byName[domain]
	u.mu.RUnlock()
	if d == nil {
		d = u.add(domain)
	}
	d.calls.Inc()
	last := d.lastLog.Load()
	if last != 0 && nowMs-last < unknownDomainLogMs || !d.lastLog.CompareAndSwap(last, nowMs) {
		d.suppressed.Add(1)
		return
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "unknown domain: no policy defines it, so its calls are answered OK without limiting",
		slog.String("domain", domain), slog.String("metric_domain", d.label), slog.Int64("suppressed", d.suppressed.Swap(0)))
}

// add returns the series of a domain not seen before: its own while there is room, else other.
func (u *unknownDomains) add(domain string) *unknownDomain {
	if u.full.Load() {
		return u.other
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if d := u.byName[domain]; d != nil {
		return d
	}
	if len(u.byName) >= maxUnknownDomains {
		u.full.Store(true)
		return u.other
	}
	// A label value must be UTF-8; the caller's domain need not be.
	label := strings.ToValidUTF8(domain, "\uFFFD")
	if label == otherDomain {
		label += "_" // a domain named "_other" is not the overflow
	}
	d := &unknownDomain{label: label, calls: u.vec.WithLabelValues(label)}
	u.byName[domain] = d
	return d
}
