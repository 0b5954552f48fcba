package enforcer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// mode is what a rule does with an over-limit verdict on this instance.
type mode uint8

const (
	modeEnforce mode = iota // reject
	modeSoft                // admit with RateLimit-Warning
	modeShadow              // admit, count a shadow block, log RateLimitShadowBlock
)

// runtimeConfig is one loaded snapshot, compiled for the request path. It is immutable once
// built and swapped atomically on reload.
type runtimeConfig struct {
	model   *policy.Model
	version string // "sha256:" and the first 16 hex digits of the file's hash
	rules   int
	domains map[string]*domainState
}

type domainState struct {
	d         *policy.Domain
	rules     map[*policy.Rule]*ruleState
	unmatched prometheus.Counter // requests_total{rule="",decision="ok"}
}

// ruleState is a rule compiled for the request path.
type ruleState struct {
	domain, name string
	stage        string // the rule's stage name, for the journal
	limits       []engine.Limit
	views        []*limitView // per limit, for statuses and headers
	depth        int          // entries the rule matches, without the sub-shard attribute
	shards       int64        // sub-shard count, 0 when not sub-sharded
	shardNames   []string
	cost         int64
	mode         mode
	failClosed   bool
	fallback     []engine.Limit // nil: admit everything while the store is unavailable
	lm           *engine.LeaseManager

	ok, over, shadowOver, softOver prometheus.Counter
	shadowBlock                    prometheus.Counter
	bypassOpen, bypassError        prometheus.Counter

	lastShadowLog    atomic.Int64 // unix ms of the last RateLimitShadowBlock log line
	shadowSuppressed atomic.Int64
}

func (rs *ruleState) shardName(i int64) string { return rs.shardNames[i] }

// compile builds the request-path form of m. instance decides canary membership.
func compile(m *policy.Model, raw []byte, instance string, mx *metrics, ls *leasing) (*runtimeConfig, error) {
	rc := &runtimeConfig{model: m, version: versionOf(raw), domains: make(map[string]*domainState, len(m.Domains))}
	member := canaryBucket(instance)
	for _, d := range m.Domains {
		if d == nil || d.Name == "" {
			return nil, fmt.Errorf("snapshot: a domain has no name")
		}
		if _, dup := rc.domains[d.Name]; dup {
			return nil, fmt.Errorf("snapshot: domain %q appears twice", d.Name)
		}
		d.Compile()
		ds := &domainState{d: d, rules: make(map[*policy.Rule]*ruleState, len(d.Rules)),
			unmatched: mx.requests.WithLabelValues(d.Name, "", decisionOK)}
		for _, r := range d.Rules {
			rs, err := compileRule(d.Name, r, member, mx, ls)
			if err != nil {
				return nil, fmt.Errorf("snapshot: domain %q: rule %q (%s): %w", d.Name, r.Name, r.Pos, err)
			}
			ds.rules[r] = rs
			rc.rules++
		}
		rc.domains[d.Name] = ds
	}
	return rc, nil
}

func compileRule(domain string, r *policy.Rule, member int, mx *metrics, ls *leasing) (*ruleState, error) {
	if len(r.Limits) == 0 {
		return nil, fmt.Errorf("no limits")
	}
	lm, err := ls.manager(r.Lease)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	rs := &ruleState{domain: domain, name: r.Name, stage: string(r.Stage.Name), lm: lm,
		failClosed: r.FailureMode == policy.FailClosed, cost: max(r.Limits[0].Cost, 1), depth: len(r.Match)}
	if r.SubShards != nil && r.SubShards.Count > 1 {
		rs.shards = int64(r.SubShards.Count)
		for i := range r.SubShards.Count {
			rs.shardNames = append(rs.shardNames, strconv.Itoa(i))
		}
	}
	for i, l := range r.Limits {
		el, err := engineLimit(l)
		if err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		rs.views = append(rs.views, newLimitView(r.Name, l.Requests, l.WindowMs))
		if rs.shards > 0 {
			el = shardLimit(el, rs.shards)
		}
		rs.limits = append(rs.limits, el)
	}
	if r.Fallback != nil {
		fb := engine.Limit{Algorithm: engine.TokenBucket, Requests: r.Fallback.Requests, Window: r.Fallback.WindowMs}
		if err := fb.Validate(); err != nil {
			return nil, fmt.Errorf("fallback: %w", err)
		}
		rs.fallback = []engine.Limit{fb}
	}
	switch r.Stage.Name {
	case policy.StageShadow:
		rs.mode = modeShadow
	case policy.StageSoft:
		rs.mode = modeSoft
	case policy.StageCanary:
		rs.mode = modeSoft
		if member < r.Stage.CanaryPercent {
			rs.mode = modeEnforce
		}
	case policy.StageEnforce, "":
		rs.mode = modeEnforce
	default:
		return nil, fmt.Errorf("unknown stage %q", r.Stage.Name)
	}
	rs.ok = mx.requests.WithLabelValues(domain, r.Name, decisionOK)
	rs.over = mx.requests.WithLabelValues(domain, r.Name, decisionOverLimit)
	rs.shadowOver = mx.requests.WithLabelValues(domain, r.Name, decisionShadow)
	rs.softOver = mx.requests.WithLabelValues(domain, r.Name, decisionSoft)
	rs.shadowBlock = mx.shadowBlocks.WithLabelValues(domain, r.Name)
	rs.bypassOpen = mx.bypassed.WithLabelValues(bypassCircuitOpen, domain, r.Name)
	rs.bypassError = mx.bypassed.WithLabelValues(bypassStoreError, domain, r.Name)
	return rs, nil
}

// engineLimit converts a policy limit to the engine's, validated.
func engineLimit(l policy.Limit) (engine.Limit, error) {
	el := engine.Limit{Requests: l.Requests, Window: l.WindowMs, Burst: l.Burst}
	switch l.Algorithm {
	case policy.TokenBucket, "":
		el.Algorithm = engine.TokenBucket
	case policy.SlidingWindow:
		el.Algorithm = engine.SlidingWindow
	case policy.FixedWindow:
		el.Algorithm = engine.FixedWindow
	default:
		return el, fmt.Errorf("unknown algorithm %q", l.Algorithm)
	}
	if el.Burst == el.Requests {
		el.Burst = 0
	}
	return el, el.Validate()
}

// shardLimit is one of n sub-shards of l: 1/n of its requests and burst, at least 1.
func shardLimit(l engine.Limit, n int64) engine.Limit {
	l.Requests = max(l.Requests/n, 1)
	if l.Burst > 0 {
		l.Burst = max(l.Burst/n, 1)
	}
	return l
}

// shardOf picks the sub-shard of value among n: FNV-1a of the value, modulo n.
func shardOf(value string, n int64) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(value); i++ {
		h ^= uint64(value[i])
		h *= 1099511628211
	}
	return int64(h % uint64(n))
}

// canaryBucket places an instance in [0, 100): it enforces a canary rule whose percent is
// above its bucket. The hash is stable, so an instance keeps its membership across restarts
// and reloads, and raising the percent only adds instances.
func canaryBucket(instance string) int {
	h := fnv.New64a()
	h.Write([]byte(instance))
	return int(h.Sum64() % 100)
}

// versionOf is a snapshot's version: "sha256:" and the first 16 hex digits of its hash.
func versionOf(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:8])
}
