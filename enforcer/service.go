package enforcer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
)

// service implements the RLS v3 RateLimitService on an Enforcer.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	e *Enforcer
}

// verdict is the decision for one descriptor before its rule's stage is applied.
type verdict struct {
	over      bool
	remaining int64
	resetMs   int64
	retryMs   int64
	limiting  int
	via       string
}

// ShouldRateLimit implements the RLS v3 protocol. See the package documentation for how
// descriptors are matched and decided.
func (s service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	e := s.e
	if bad := validateRequest(req); bad != nil {
		e.mx.invalid.WithLabelValues(bad.reason).Inc()
		return nil, bad.err
	}
	cfg := e.cfg.Load()
	n := len(req.Descriptors)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	// One allocation each for all statuses and durations of the call.
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	durations := make([]durationpb.Duration, n)
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	var seq uint64
	if e.journal != nil {
		seq = e.seq.Add(1)
	}
	dom := cfg.domains[req.Domain]
	var choice, warned headerChoice
	for i, d := range req.Descriptors {
		st := &statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		var rs *ruleState
		var ents [MaxEntries]policy.Entry
		if dom != nil {
			for j, en := range d.Entries {
				ents[j] = policy.Entry{Key: en.Key, Value: en.Value}
			}
			if r, ok := dom.d.Lookup(ents[:len(d.Entries)]); ok {
				rs = dom.rules[r]
			}
		}
		if rs == nil {
			// envoyproxy/ratelimit's behaviour: no rule, no limit, OK.
			if dom != nil {
				dom.unmatched.Inc()
			}
			e.journalDecision(seq, i, req.Domain, nil, "", 0, verdict{via: journal.ViaUnmatched}, false)
			continue
		}
		cost := rs.cost
		if req.HitsAddend > 0 {
			cost = int64(req.HitsAddend)
		}
		if d.HitsAddend != nil && d.HitsAddend.Value > 0 {
			cost = int64(d.HitsAddend.Value)
		}
		limits, views := rs.limits, rs.views
		if d.Limit != nil {
			limits, views = rs.override(d.Limit)
		}
		key := rs.key(ents[:len(d.Entries)], d.Limit)
		v := e.decide(ctx, rs, key, limits, cost)
		view := views[min(v.limiting, len(views)-1)]
		st.CurrentLimit = view.current
		st.LimitRemaining = uint32(min(max(v.remaining, 0), 1<<32-1))
		until := v.resetMs
		if v.over && v.retryMs > 0 {
			until = v.retryMs
		}
		durations[i].Seconds, durations[i].Nanos = until/1000, int32(until%1000)*1e6
		st.DurationUntilReset = &durations[i]

		c := headerChoice{view: view, remaining: v.remaining, resetMs: v.resetMs}
		enforced := false
		switch {
		case !v.over:
			rs.ok.Inc()
		case rs.mode == modeEnforce:
			enforced = true
			rs.over.Inc()
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			c.retryMs = max(v.retryMs, 1)
		case rs.mode == modeSoft:
			rs.softOver.Inc()
			c.warn = true
			warned = c
		default:
			rs.shadowOver.Inc()
			rs.shadowBlock.Inc()
			e.shadowEvent(rs, key, cost)
		}
		e.journalDecision(seq, i, req.Domain, rs, key, cost, v, enforced)
		if c.better(&choice) {
			choice = c
		}
	}
	if choice.view != nil {
		resp.ResponseHeadersToAdd = make([]*corev3.HeaderValue, 0, 6)
		resp.ResponseHeadersToAdd = appendHeaders(resp.ResponseHeadersToAdd, &choice, false, e.legacy)
	}
	if warned.view != nil {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, warned.view.warning)
	}
	return resp, nil
}

// decide asks the limiter for cost tokens of key and applies the rule's failure mode when the
// store is unavailable.
func (e *Enforcer) decide(ctx context.Context, rs *ruleState, key string, limits []engine.Limit, cost int64) verdict {
	d, err := rs.lm.Take(ctx, key, limits, cost)
	if err == nil {
		v := verdict{over: !d.OK, remaining: d.Remaining, via: journal.ViaStore}
		// The lease manager does not say when the key is full again; a limit's refill time
		// is an upper bound.
		v.resetMs = limits[0].RefillMs()
		if d.Local {
			v.via = journal.ViaLease
		}
		if v.over {
			if d.Local {
				v.via = journal.ViaShortCircuit
			}
			v.retryMs = d.RetryAfter
			if v.retryMs == engine.Never || v.retryMs <= 0 {
				v.retryMs = v.resetMs
			}
			v.resetMs = v.retryMs
		}
		return v
	}
	if errors.Is(err, engine.ErrBadRequest) {
		// A limit the engine rejects (an override with an inexact window, a cost beyond the
		// exact range) is denied, never admitted silently.
		return verdict{over: true, retryMs: 1000, via: journal.ViaFailClosed}
	}
	e.log.Debug("store unavailable", "error", err)
	bypass := rs.bypassError
	if errors.Is(err, ErrCircuitOpen) {
		bypass = rs.bypassOpen
	}
	retry := max(e.cooldownMs, 1000)
	switch {
	case rs.failClosed:
		return verdict{over: true, resetMs: retry, retryMs: retry, via: journal.ViaFailClosed}
	case rs.fallback != nil:
		fb, ferr := e.fallback.Take(ctx, engine.TakeRequest{Key: key, Limits: rs.fallback, Want: cost, Min: cost, Now: e.clock.Now()})
		if ferr != nil || fb.Granted == 0 {
			return verdict{over: true, remaining: 0, resetMs: fb.ResetAfter, retryMs: max(fb.RetryAfter, 1), via: journal.ViaFallback}
		}
		bypass.Inc()
		return verdict{remaining: fb.Remaining, resetMs: fb.ResetAfter, via: journal.ViaFallback}
	default:
		bypass.Inc()
		return verdict{via: journal.ViaFailOpen}
	}
}

// key is the store key of a descriptor matched by rs: the domain, the rule and every matched
// entry's key and value, then the sub-shard and the limit override when there are any.
func (rs *ruleState) key(ents []policy.Entry, override *commonv3.RateLimitDescriptor_RateLimitOverride) string {
	var parts [2 + 2*MaxEntries + 3]string
	parts[0], parts[1] = rs.domain, rs.name
	n := 2
	matched := ents
	if rs.shards > 0 && len(ents) > 0 && len(ents) > rs.depth {
		matched = ents[:len(ents)-1]
	}
	for _, en := range matched {
		parts[n], parts[n+1] = en.Key, en.Value
		n += 2
	}
	if rs.shards > 0 {
		var shard int64
		if len(ents) > len(matched) {
			shard = shardOf(ents[len(ents)-1].Value, rs.shards)
		}
		parts[n], parts[n+1] = "shard", rs.shardName(shard)
		n += 2
	}
	if override != nil {
		ms, _ := overrideWindowMs(override)
		parts[n] = "override=" + strconv.FormatUint(uint64(override.RequestsPerUnit), 10) + "/" + strconv.FormatInt(ms, 10)
		n++
	}
	var buf [256]byte
	return string(engine.AppendKey(buf[:0], parts[:n]...))
}

// override returns the limits and views of a descriptor's limit override: the rule's first
// limit's algorithm with the override's rate.
func (rs *ruleState) override(o *commonv3.RateLimitDescriptor_RateLimitOverride) ([]engine.Limit, []*limitView) {
	ms, _ := overrideWindowMs(o)
	l := engine.Limit{Algorithm: rs.limits[0].Algorithm, Requests: int64(o.RequestsPerUnit), Window: ms}
	return []engine.Limit{l}, []*limitView{newLimitView(rs.name, l.Requests, ms)}
}

// overrideWindowMs converts an override's unit and multiplier to milliseconds.
func overrideWindowMs(o *commonv3.RateLimitDescriptor_RateLimitOverride) (int64, bool) {
	var ms int64
	switch o.Unit {
	case typev3.RateLimitUnit_SECOND:
		ms = 1000
	case typev3.RateLimitUnit_MINUTE:
		ms = 60_000
	case typev3.RateLimitUnit_HOUR:
		ms = 3_600_000
	case typev3.RateLimitUnit_DAY:
		ms = 86_400_000
	case typev3.RateLimitUnit_MONTH:
		ms = 30 * 86_400_000
	case typev3.RateLimitUnit_YEAR:
		ms = 365 * 86_400_000
	default:
		return 0, false
	}
	if m := o.UnitMultiplier; m != nil && m.Value > 1 {
		ms *= int64(m.Value)
	}
	return ms, true
}

// shadowEvent logs a RateLimitShadowBlock event, at most one per rule per second; the events
// it skips are counted in the next one's "suppressed" (rate_limit_shadow_block_total counts
// them all).
func (e *Enforcer) shadowEvent(rs *ruleState, key string, cost int64) {
	now := time.Now().UnixMilli()
	last := rs.lastShadowLog.Load()
	if now-last < 1000 || !rs.lastShadowLog.CompareAndSwap(last, now) {
		rs.shadowSuppressed.Add(1)
		return
	}
	e.log.LogAttrs(context.Background(), slog.LevelInfo, "RateLimitShadowBlock",
		slog.String("event", "RateLimitShadowBlock"), slog.String("domain", rs.domain),
		slog.String("rule", rs.name), slog.String("key", key), slog.Int64("cost", cost),
		slog.Int64("suppressed", rs.shadowSuppressed.Swap(0)))
}

// journalDecision writes a decision record when the journal is on.
func (e *Enforcer) journalDecision(seq uint64, i int, domain string, rs *ruleState, key string, cost int64, v verdict, enforced bool) {
	if e.journal == nil {
		return
	}
	r := journal.Record{Kind: journal.KindDecision, TimeMs: e.clock.Now(), Seq: seq, Index: i,
		Domain: domain, Key: key, Cost: cost, Via: v.via, Engine: journal.CodeOK, Code: journal.CodeOK}
	if rs != nil {
		r.Rule = rs.name
		if rs.stage != string(policy.StageEnforce) {
			r.Stage = rs.stage
		}
		r.Remaining, r.ResetMs = v.remaining, v.resetMs
		if v.over {
			r.Engine, r.ResetMs = journal.CodeOver, v.retryMs
		}
		if enforced {
			r.Code = journal.CodeOver
		}
	}
	e.journal.Write(r)
}
