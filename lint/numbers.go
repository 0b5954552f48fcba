package lint

import (
	"fmt"
	"math/big"
	"strconv"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of a rule's figures: the engine's exact integer range (RL004),
// stranding (RL006), drift (RL007) and hot keys (RL011). Lease bounds (RL005) are the model's own
// check (policy.Model.Validate). Products are
// computed with math/big, so absurd figures are reported rather than overflowing.

// limitName names limit i of r in messages: "limit 2" when r has several, else "limit".
func limitName(r *policy.Rule, i int) string {
	if len(r.Limits) > 1 {
		return fmt.Sprintf("limit %d", i+1)
	}
	return "limit"
}

// checkExactRange reports limits whose arithmetic could leave the exact integer range of a Lua
// double (RL004). The bound and the arithmetic are the engine's (engine.Limit.Validate); this
// check only explains them with the rule's figures.
func checkExactRange(_ *policy.Domain, r *policy.Rule, e *emitter) {
	for _, x := range inexactLimits(r) {
		name := x.name
		if x.share != "" {
			name += ", " + x.share
		}
		e.at(x.pos, r, "%s: %s", name, x.reason)
	}
}

// EngineProblems returns what the engine refuses in m although the model's own checks
// (policy.Model.Validate) let it through: limits and fallback buckets whose arithmetic could
// leave the exact integer range (RL004, check "exact-range"). The enforcer does not load a
// snapshot with any, so render refuses such a model; lint reports the same problems as RL004
// findings.
func EngineProblems(m *policy.Model) policy.Problems {
	var probs policy.Problems
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			for _, x := range inexactLimits(r) {
				msg := x.reason
				if x.share != "" {
					msg = x.share + ": " + msg
				}
				p := policy.Problem{Pos: x.pos, Path: policy.Path("domains", d.Name, "rules", r.Name) + "." + x.field,
					Message: msg, Check: "exact-range"}
				if p.Pos.File == "" {
					p.Pos = r.Pos
				}
				probs = append(probs, p)
			}
		}
	}
	probs.Sort()
	return probs
}

// inexact is a limit of a rule, or its fallback bucket, that the engine refuses.
type inexact struct {
	pos    policy.Pos // unknown for the fallback bucket
	field  string     // its path below the rule: limits.0 or failure.fallback
	name   string     // how messages name it: limit, limit 2 or fallback
	share  string     // the share of it that is refused, when not all of it
	reason string     // inexactReason
}

// inexactLimits returns r's limits and fallback bucket that the engine refuses (engine.LimitOf,
// engine.FallbackLimits) for leaving the exact integer range. Limits with an unknown algorithm
// are left to the model's own validation.
func inexactLimits(r *policy.Rule) []inexact {
	var out []inexact
	for i, l := range r.Limits {
		if _, err := engine.ParseAlgorithm(string(l.Algorithm)); err != nil {
			continue // the model's own validation reports it (RL000)
		}
		if el, err := engine.LimitOf(l); err != nil {
			out = append(out, inexact{pos: l.Pos, field: "limits." + strconv.Itoa(i), name: limitName(r, i), reason: inexactReason(el)})
		}
	}
	if len(out) > 0 {
		return out // the shares below are of limits already out of range
	}
	// A sub-shard's share of a limit, and a gateway's share as the default fallback, have
	// figures of their own, and so exact ranges of their own (engine.RuleLimits,
	// engine.PlanRule).
	shares := make([]engine.Limit, 0, len(r.Limits))
	for _, l := range r.Limits {
		el, err := engine.LimitOf(l)
		if err != nil {
			return out // an unknown algorithm: the model's own validation reports it
		}
		shares = append(shares, el)
	}
	if ss := r.SubShards; r.Sharded() {
		shares = engine.Shard(shares, int64(ss.Count))
		for i, l := range shares {
			if !l.ExactRangeOK() {
				out = append(out, inexact{pos: r.Limits[i].Pos, field: "limits." + strconv.Itoa(i),
					name: limitName(r, i), share: fmt.Sprintf("each of %d sub_shards (%d per %dms)", ss.Count, l.Requests, l.Window), reason: inexactReason(l)})
			}
		}
	}
	if len(out) == 0 && r.Gateways >= 2 && engine.UsesDefaultFallback(r) {
		for i, l := range engine.DefaultFallbackLimits(r, shares) {
			if !l.ExactRangeOK() {
				out = append(out, inexact{pos: r.Limits[i].Pos, field: "gateways",
					name: limitName(r, i), share: fmt.Sprintf("the default fallback's share of %d gateways (%d per %dms)", r.Gateways, l.Requests, l.Window), reason: inexactReason(l)})
			}
		}
	}
	if fb, err := engine.FallbackLimits(r); err != nil {
		out = append(out, inexact{pos: r.PosOf(policy.SettingFailure), field: "failure.fallback", name: "fallback", reason: inexactReason(fb[0])})
	}
	return out
}

// inexactReason explains why l failed engine.Limit.Validate, with the product that leaves the
// range. Callers name the limit; the engine's own error does too, so it is not repeated here.
func inexactReason(l engine.Limit) string {
	switch {
	case l.Requests < 1:
		return fmt.Sprintf("requests %d: must be at least 1", l.Requests)
	case l.Window < 1:
		return fmt.Sprintf("window %dms: must be at least 1ms", l.Window)
	case l.Burst < 0:
		return fmt.Sprintf("burst %d: must not be negative", l.Burst)
	}
	req, win := big.NewInt(l.Requests), big.NewInt(l.Window)
	if l.Algorithm != engine.TokenBucket {
		n := new(big.Int).Add(req, big.NewInt(1))
		n.Mul(n, win)
		return fmt.Sprintf("(requests %d + 1) × window_ms %d = %s exceeds 2^53−1 = %d, the exact integer range of a Lua double",
			l.Requests, l.Window, n, engine.MaxExact)
	}
	g := new(big.Int).GCD(nil, nil, req, win)
	n := new(big.Int).Mul(big.NewInt(2*l.Capacity()), win)
	n.Div(n, g)
	n.Add(n, new(big.Int).Div(req, g))
	return fmt.Sprintf("2 × burst %d × window_ms %d / g + requests %d / g = %s (g = %s) exceeds 2^53−1 = %d, the exact integer range of a Lua double",
		l.Capacity(), l.Window, l.Requests, n, g, engine.MaxExact)
}

// checkStranding reports leases that can strand more than a limit's capacity on idle gateways
// (RL006): every gateway may hold up to the maximum lease unspent.
func checkStranding(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if r.Gateways < 1 || r.Lease.Max < 1 {
		return
	}
	held := new(big.Int).Mul(big.NewInt(r.Gateways), big.NewInt(r.Lease.Max))
	for i, l := range r.Limits {
		el, _ := engine.LimitOf(l) // RL004 reports an invalid limit; its capacity still counts
		if el.Requests < 1 {
			continue // an unknown algorithm gives the zero Limit
		}
		capacity := el.Capacity()
		if held.Cmp(big.NewInt(capacity)) > 0 {
			e.at(l.Pos, r, "%s: %d gateways × lease max %d = %s tokens can be stranded, more than the capacity %d",
				limitName(r, i), r.Gateways, r.Lease.Max, held, capacity)
		}
	}
}

// checkDrift reports leasing whose worst-case over-admission, gateways × max lease, exceeds the
// rule's drift tolerance (RL007). The comparison is exact integer math in basis points:
// gateways × max × 10000 > tolerance_bp × requests.
func checkDrift(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if r.Gateways < 1 || r.Lease.Max < 1 || r.DriftToleranceBP < 0 {
		return
	}
	over := new(big.Int).Mul(big.NewInt(r.Gateways), big.NewInt(r.Lease.Max))
	over.Mul(over, big.NewInt(10000))
	for i, l := range r.Limits {
		if l.Requests < 1 {
			continue
		}
		allowed := new(big.Int).Mul(big.NewInt(r.DriftToleranceBP), big.NewInt(l.Requests))
		if over.Cmp(allowed) <= 0 {
			continue
		}
		// Round the shown drift up, so it never prints as equal to the tolerance it exceeds.
		bp := new(big.Int).Add(over, big.NewInt(l.Requests-1))
		bp.Div(bp, big.NewInt(l.Requests))
		e.at(l.Pos, r, "drift %s over tolerance %s: %d gateways × lease max %d / %d requests",
			percentBP(bp), percentBP(big.NewInt(r.DriftToleranceBP)), r.Gateways, r.Lease.Max, l.Requests)
		if len(r.Limits) > 1 {
			e.out[len(e.out)-1].Message += fmt.Sprintf(" (%s)", limitName(r, i))
		}
	}
}

// percentBP formats basis points as a percentage with two decimals: 240 is "2.40%".
func percentBP(bp *big.Int) string {
	q, m := new(big.Int).QuoRem(bp, big.NewInt(100), new(big.Int))
	return fmt.Sprintf("%s.%02d%%", q, m.Int64())
}

// checkHotKey reports a rule whose expected peak QPS exceeds the domain's per-key budget without
// enough sub-shards to spread it (RL011).
func checkHotKey(d *policy.Domain, r *policy.Rule, e *emitter) {
	budget := d.Gateway.PerKeyQPSBudget
	if budget < 1 || r.ExpectedPeakQPS <= budget {
		return
	}
	want := (r.ExpectedPeakQPS + budget - 1) / budget
	if !r.Sharded() {
		e.at(r.PosOf(policy.SettingExpectedPeakQPS), r, "hot key: expected peak %d QPS is over the per-key budget %d QPS and the rule has no sub_shards (want count ≥ %d)",
			r.ExpectedPeakQPS, budget, want)
		return
	}
	n := int64(r.SubShards.Count)
	if per := (r.ExpectedPeakQPS + n - 1) / n; per > budget {
		e.at(r.PosOf(policy.SettingExpectedPeakQPS), r, "hot key: expected peak %d QPS over %d sub_shards is %d QPS per shard, over the per-key budget %d QPS (want count ≥ %d)",
			r.ExpectedPeakQPS, n, per, budget, want)
	}
}
