package lint

import (
	"fmt"
	"math/big"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of a rule's figures: the engine's exact integer range (RL004),
// lease bounds (RL005), stranding (RL006), drift (RL007) and hot keys (RL011). Products are
// computed with math/big, so absurd figures are reported rather than overflowing.

// engineLimit converts a policy limit into the engine's; ok is false for an unknown algorithm.
func engineLimit(l policy.Limit) (_ engine.Limit, ok bool) {
	var alg engine.Algorithm
	switch l.Algorithm {
	case policy.TokenBucket, "":
		alg = engine.TokenBucket
	case policy.SlidingWindow:
		alg = engine.SlidingWindow
	case policy.FixedWindow:
		alg = engine.FixedWindow
	default:
		return engine.Limit{}, false
	}
	return engine.Limit{Algorithm: alg, Requests: l.Requests, Window: l.WindowMs, Burst: l.Burst}, true
}

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
	for i, l := range r.Limits {
		el, ok := engineLimit(l)
		if !ok {
			e.at(l.Pos, r, "%s: unknown algorithm %q", limitName(r, i), l.Algorithm)
			continue
		}
		if err := el.Validate(); err != nil {
			e.at(l.Pos, r, "%s: %s", limitName(r, i), inexactReason(el, err))
		}
	}
	if fb := r.Fallback; fb != nil {
		el := engine.Limit{Algorithm: engine.TokenBucket, Requests: fb.Requests, Window: fb.WindowMs}
		if err := el.Validate(); err != nil {
			e.at(r.Pos, r, "fallback: %s", inexactReason(el, err))
		}
	}
}

// inexactReason explains why l failed validation, with the product that leaves the range.
func inexactReason(l engine.Limit, err error) string {
	if l.Requests < 1 || l.Window < 1 || l.Burst < 0 {
		return err.Error()
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

// checkLeaseBounds reports a minimum lease above the maximum (RL005).
func checkLeaseBounds(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if r.Lease.Min > r.Lease.Max {
		e.at(r.Pos, r, "lease min %d is above lease max %d", r.Lease.Min, r.Lease.Max)
	}
}

// checkStranding reports leases that can strand more than a limit's capacity on idle gateways
// (RL006): every gateway may hold up to the maximum lease unspent.
func checkStranding(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if r.Gateways < 1 || r.Lease.Max < 1 {
		return
	}
	held := new(big.Int).Mul(big.NewInt(r.Gateways), big.NewInt(r.Lease.Max))
	for i, l := range r.Limits {
		el, ok := engineLimit(l)
		if !ok || el.Requests < 1 {
			continue
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
	if r.SubShards == nil || r.SubShards.Count < 2 {
		e.at(r.Pos, r, "hot key: expected peak %d QPS is over the per-key budget %d QPS and the rule has no sub_shards (want count ≥ %d)",
			r.ExpectedPeakQPS, budget, want)
		return
	}
	n := int64(r.SubShards.Count)
	if per := (r.ExpectedPeakQPS + n - 1) / n; per > budget {
		e.at(r.Pos, r, "hot key: expected peak %d QPS over %d sub_shards is %d QPS per shard, over the per-key budget %d QPS (want count ≥ %d)",
			r.ExpectedPeakQPS, n, per, budget, want)
	}
}
