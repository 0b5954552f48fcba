package engine

import (
	"context"
	"errors"
	"fmt"
)

// Via says what decided a Verdict.
type Via uint8

// The sources of a Verdict. Their names are the journal's "via" values.
const (
	// ViaLease is a decision on tokens leased earlier, without I/O.
	ViaLease Via = iota
	// ViaStore is a synchronous store take.
	ViaStore
	// ViaShortCircuit is a denial without I/O: the store said the key is over its limit
	// until an instant not yet reached, or the cost exceeds what the key can ever grant.
	ViaShortCircuit
	// ViaFallback is the rule's local fallback bucket, while the store is unavailable.
	ViaFallback
	// ViaFailOpen is a fail-open rule without a fallback of its own, while the store is
	// unavailable: its key is bounded by FallbackFactor times its recently admitted rate, or
	// by the rule's DefaultFallback when it has none.
	ViaFailOpen
	// ViaFailClosed denies while the store is unavailable, or a request the engine rejects.
	ViaFailClosed
)

var viaNames = [...]string{"lease", "store", "short_circuit", "fallback", "fail_open", "fail_closed"}

// String returns v's journal name, for example "short_circuit".
func (v Via) String() string {
	if int(v) < len(viaNames) {
		return viaNames[v]
	}
	return fmt.Sprintf("via(%d)", uint8(v))
}

// Verdict is a rule's answer for one key, before the rule's stage applies.
type Verdict struct {
	// Over reports that the request is over the limit.
	Over bool
	// Remaining is what the key can still grant, as far as the deciding party knows.
	Remaining int64
	// ResetMs is the time in ms until the limit that Limiting names is full again (token
	// bucket) or its window ends: RLS duration_until_reset and the RateLimit header's t. When
	// Over it is never before RetryMs.
	ResetMs int64
	// RetryMs is, when Over, the time in ms to wait before retrying, at least 1.
	RetryMs int64
	// Limiting is the index in the decided limits of the tightest one, whose figures the
	// response reports.
	Limiting int
	Via      Via
}

// Unavailable is what Decide needs to answer while the store is unavailable.
type Unavailable struct {
	// Fallback holds the local fallback buckets of fail-open rules (an in-process Memory).
	Fallback Store
	// Now is the decision time in ms, for the fallback bucket; 0 means the fallback store's
	// own clock.
	Now int64
	// RetryMs is the retry-after of a denial while the store is unavailable (the enforcer's
	// circuit breaker cooldown, at least a second).
	RetryMs int64
}

// Decide decides a request of cost tokens on key with lm, against limits (p.Limits, or a
// descriptor's override). When lm cannot reach the store and the key's leased tokens are
// spent, p's failure mode decides: a fail-closed rule denies; a fail-open one admits up to a
// local bucket in u.Fallback, never without bound: the policy's fallback (p.Fallback), else
// FallbackFactor times the key's recently admitted rate on lm, else p.DefaultFallback. A request the engine rejects as malformed (ErrBadRequest: an
// inexact override, a cost beyond the exact range) is denied, never admitted silently. The
// error is the store's failure or the rejection that led to such a verdict, nil when the store
// or the lease decided.
func (p *RulePlan) Decide(ctx context.Context, lm *LeaseManager, key string, limits []Limit, cost int64, u Unavailable) (Verdict, error) {
	d, err := lm.Take(ctx, key, limits, cost)
	if err == nil {
		return verdictOf(d, limits), nil
	}
	return p.unavailable(ctx, lm, key, limits, cost, u, err)
}

// DecideBytes is Decide for a key built with AppendRuleKey into a reused buffer
// (LeaseManager.TakeBytes): a decision the store or the lease makes does not allocate. key may
// be reused once DecideBytes returns.
func (p *RulePlan) DecideBytes(ctx context.Context, lm *LeaseManager, key []byte, limits []Limit, cost int64, u Unavailable) (Verdict, error) {
	d, err := lm.TakeBytes(ctx, key, limits, cost)
	if err == nil {
		return verdictOf(d, limits), nil
	}
	return p.unavailable(ctx, lm, string(key), limits, cost, u, err)
}

// unavailable is the verdict when the lease manager returned err instead of a decision.
func (p *RulePlan) unavailable(ctx context.Context, lm *LeaseManager, key string, limits []Limit, cost int64, u Unavailable, err error) (Verdict, error) {
	if errors.Is(err, ErrBadRequest) {
		return Verdict{Over: true, RetryMs: 1000, Via: ViaFailClosed}, err
	}
	// A take that goes on in the store owes its request's cost out of its grant (lateTake),
	// which a request that is not admitted here gives up.
	late := lateTakeOf(err)
	if errors.Is(err, context.Canceled) {
		// The caller hung up (an enforcer's client that reset its request): no verdict is
		// wanted, and none may spend the fallback bucket, which resets would drain.
		if late != nil {
			late.release(cost)
		}
		return Verdict{}, err
	}
	if p.FailClosed {
		if late != nil {
			late.release(cost)
		}
		return Verdict{Over: true, ResetMs: u.RetryMs, RetryMs: u.RetryMs, Via: ViaFailClosed}, err
	}
	bound, via := p.Fallback, ViaFallback
	if bound == nil {
		def := p.DefaultFallback
		if len(limits) == 0 || len(p.Limits) == 0 || &limits[0] != &p.Limits[0] {
			def = Shard(limits, p.Rule.Gateways) // a descriptor's override: its own share
		}
		bound, via = lm.fallbackOf(key, def, cost), ViaFailOpen
	}
	fb, ferr := u.Fallback.Take(ctx, TakeRequest{Key: key, Limits: bound, Want: cost, Min: cost, Now: u.Now})
	if ferr != nil || fb.Granted == 0 {
		if late != nil {
			late.release(cost)
		}
		return Verdict{Over: true, ResetMs: fb.ResetAfter, RetryMs: max(fb.RetryAfter, 1), Via: via}, err
	}
	return Verdict{Remaining: fb.Remaining, ResetMs: fb.ResetAfter, Via: via}, err
}

// verdictOf is the Verdict of the lease manager's decision d on a key with limits.
func verdictOf(d Decision, limits []Limit) Verdict {
	v := Verdict{Over: !d.OK, Remaining: d.Remaining, ResetMs: d.ResetAfter, Limiting: d.Limiting, Via: ViaStore}
	if d.Local {
		v.Via = ViaLease
	}
	if !v.Over {
		return v
	}
	if d.Local {
		v.Via = ViaShortCircuit
	}
	v.RetryMs = d.RetryAfter
	if v.RetryMs == Never || v.RetryMs <= 0 {
		// A cost the key can never grant: suggest the longest a refill of the limit can take.
		v.RetryMs = limits[d.Limiting].RefillMs()
	}
	v.RetryMs = max(v.RetryMs, 1)
	// With several limits the tightest one may be full again before another one lets the
	// request through; a reset before the retry would tell clients to come back too early.
	v.ResetMs = max(v.ResetMs, v.RetryMs)
	return v
}
