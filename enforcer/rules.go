package enforcer

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// runtimeConfig is one loaded snapshot, compiled for the request path. It is immutable once
// built and swapped atomically on reload.
type runtimeConfig struct {
	model   *policy.Model
	version string // policy.ContentHash of the model: what rlctl render writes in content_hash
	gen     int    // the journal's config generation: 1 for the first config loaded
	rules   int
	domains map[string]*domainState
}

type domainState struct {
	d         *policy.Domain
	rules     []*ruleState       // by index in d.Rules (policy.Domain.LookupIndex)
	unmatched prometheus.Counter // requests_total{rule="",decision="ok"}
}

// has reports whether the domain has a rule of that name.
func (ds *domainState) has(rule string) bool {
	for _, rs := range ds.rules {
		if rs.name == rule {
			return true
		}
	}
	return false
}

// ruleState is a rule compiled for the request path: the engine's plan for it, and what this
// instance adds around the plan (its stage here, response views, metrics).
type ruleState struct {
	plan  *engine.RulePlan
	name  string
	views []*limitView // per limit, for statuses and headers
	mode  policy.Mode
	lms   []*engine.LeaseManager // per lease stripe (see order)

	ok, over, shadowOver, softOver, failedClosed prometheus.Counter
	shadowBlock                                  prometheus.Counter
	bypassOpen, bypassError                      prometheus.Counter

	lastShadowLog    atomic.Int64 // unix ms of the last RateLimitShadowBlock log line
	shadowSuppressed atomic.Int64

	overrides  sync.Map // [2]int64{requests, window ms} → *overrideForm (override)
	nOverrides atomic.Int64
}

// compile builds the request-path form of m, whose content hash is version. instance decides
// canary membership.
func compile(m *policy.Model, version, instance string, mx *metrics, ls *leasing) (*runtimeConfig, error) {
	rc := &runtimeConfig{model: m, version: version, domains: make(map[string]*domainState, len(m.Domains))}
	for _, d := range m.Domains {
		if d == nil || d.Name == "" {
			return nil, fmt.Errorf("snapshot: a domain has no name")
		}
		if _, dup := rc.domains[d.Name]; dup {
			return nil, fmt.Errorf("snapshot: domain %q appears twice", d.Name)
		}
		d.Compile()
		ds := &domainState{d: d, rules: make([]*ruleState, 0, len(d.Rules)),
			unmatched: mx.requests.WithLabelValues(d.Name, "", decisionOK)}
		for _, r := range d.Rules {
			rs, err := compileRule(d.Name, r, instance, mx, ls)
			if err != nil {
				return nil, fmt.Errorf("snapshot: domain %q: rule %q (%s): %w", d.Name, r.Name, r.Pos, err)
			}
			for _, v := range rs.views {
				v.setSoftNotice(d, r)
			}
			ds.rules = append(ds.rules, rs)
			rc.rules++
		}
		rc.domains[d.Name] = ds
	}
	return rc, nil
}

// keepMeters gives rc's soft-stage over-quota meters the counts of prev's (the config serving
// before rc), for each limit of a rule of the same domain and name with the same requests and
// window, and for each limit override the rule has answered: a reload of another rule must not
// reset them (RateLimit-Warning's over= may run high, never low). prev may be nil.
func (rc *runtimeConfig) keepMeters(prev *runtimeConfig) {
	if prev == nil {
		return
	}
	for name, ds := range rc.domains {
		pd := prev.domains[name]
		if pd == nil {
			continue
		}
		old := map[string]*ruleState{}
		for _, rs := range pd.rules {
			old[rs.name] = rs
		}
		for _, rs := range ds.rules {
			o := old[rs.name]
			if o == nil {
				continue
			}
			for i, v := range rs.views {
				if i < len(o.views) && o.views[i].requests == v.requests && o.views[i].windowMs == v.windowMs {
					v.over = o.views[i].over
				}
			}
			// The overrides the rule has seen keep their meters too, in forms built now for the
			// new rule (the old forms' limits and views are the old rule's).
			o.overrides.Range(func(id, f any) bool {
				nf := rs.newOverrideForm(id.([2]int64))
				nf.views[0].over = f.(*overrideForm).views[0].over
				rs.overrides.Store(id, nf)
				rs.nOverrides.Add(1)
				return true
			})
		}
	}
}

func compileRule(domain string, r *policy.Rule, instance string, mx *metrics, ls *leasing) (*ruleState, error) {
	if !r.Stage.Name.Valid() {
		return nil, fmt.Errorf("unknown stage %q", r.Stage.Name)
	}
	plan, err := engine.PlanRule(domain, r)
	if err != nil {
		return nil, err
	}
	lms, err := ls.managers(r.Lease, plan.Lease)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	rs := &ruleState{plan: plan, name: r.Name, mode: r.Mode(instance), lms: lms}
	for _, l := range r.Limits {
		rs.views = append(rs.views, newLimitView(r.Name, l.Requests, l.WindowMs))
	}
	rs.ok = mx.requests.WithLabelValues(domain, r.Name, decisionOK)
	rs.over = mx.requests.WithLabelValues(domain, r.Name, decisionOverLimit)
	rs.shadowOver = mx.requests.WithLabelValues(domain, r.Name, decisionShadow)
	rs.softOver = mx.requests.WithLabelValues(domain, r.Name, decisionSoft)
	rs.failedClosed = mx.requests.WithLabelValues(domain, r.Name, decisionFailedClosed)
	rs.shadowBlock = mx.shadowBlocks.WithLabelValues(domain, r.Name)
	rs.bypassOpen = mx.bypassed.WithLabelValues(bypassCircuitOpen, domain, r.Name)
	rs.bypassError = mx.bypassed.WithLabelValues(bypassStoreError, domain, r.Name)
	return rs, nil
}
