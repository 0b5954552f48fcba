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
			e.journalUnmatched(seq, i, req.Domain, cfg.gen)
			continue
		}
		cost := rs.plan.Cost
		if req.HitsAddend > 0 {
			cost = int64(req.HitsAddend)
		}
		if d.HitsAddend != nil && d.HitsAddend.Value > 0 {
			cost = int64(d.HitsAddend.Value)
		}
		limits, views := rs.plan.Limits, rs.views
		if d.Limit != nil {
			limits, views = rs.override(d.Limit)
		}
		key := rs.key(ents[:len(d.Entries)], d.Limit)
		// The decision and its journal record are one section of the key's stripe (see order).
		stripe := e.order.index(key)
		now := e.order.lock(stripe)
		v := e.decide(ctx, rs, rs.lms[stripe], key, limits, cost, now)
		e.journalDecision(now, seq, i, req.Domain, cfg.gen, rs, key, cost, v, d.Limit)
		e.order.unlock(stripe)

		view := views[0]
		st.CurrentLimit = view.current
		st.LimitRemaining = uint32(min(max(v.Remaining, 0), 1<<32-1))
		until := v.ResetMs
		if v.Over && v.RetryMs > 0 {
			until = v.RetryMs
		}
		durations[i].Seconds, durations[i].Nanos = until/1000, int32(until%1000)*1e6
		st.DurationUntilReset = &durations[i]

		c := headerChoice{view: view, remaining: v.Remaining, resetMs: v.ResetMs}
		switch {
		case !v.Over:
			rs.ok.Inc()
		case rs.mode == policy.ModeEnforce:
			rs.over.Inc()
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			c.retryMs = max(v.RetryMs, 1)
		case rs.mode == policy.ModeSoft:
			rs.softOver.Inc()
			c.warn = true
			warned = c
		default:
			rs.shadowOver.Inc()
			rs.shadowBlock.Inc()
			e.shadowEvent(rs, key, cost)
		}
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

// decide asks the rule's plan for cost tokens of key, which applies the rule's failure mode when
// the store is unavailable, and counts the requests that mode admits.
func (e *Enforcer) decide(ctx context.Context, rs *ruleState, lm *engine.LeaseManager, key string, limits []engine.Limit, cost, now int64) engine.Verdict {
	v, err := rs.plan.Decide(ctx, lm, key, limits, cost, engine.Unavailable{Fallback: e.fallback, Now: now, RetryMs: e.unavailableRetryMs})
	if err == nil || errors.Is(err, engine.ErrBadRequest) {
		return v
	}
	e.log.Debug("store unavailable", "error", err)
	if !v.Over {
		if errors.Is(err, ErrCircuitOpen) {
			rs.bypassOpen.Inc()
		} else {
			rs.bypassError.Inc()
		}
	}
	return v
}

// key is the store key of a descriptor matched by rs (engine.AppendRuleKey), followed by the
// limit override when there is one.
func (rs *ruleState) key(ents []policy.Entry, override *commonv3.RateLimitDescriptor_RateLimitOverride) string {
	var buf [256]byte
	b := engine.AppendRuleKey(buf[:0], rs.plan.Domain, rs.plan.Rule, ents)
	if override != nil {
		ms, _ := overrideWindowMs(override)
		b = engine.AppendKeyPart(b, "override="+strconv.FormatUint(uint64(override.RequestsPerUnit), 10)+"/"+strconv.FormatInt(ms, 10))
	}
	return string(b)
}

// override returns the limits and views of a descriptor's limit override.
func (rs *ruleState) override(o *commonv3.RateLimitDescriptor_RateLimitOverride) ([]engine.Limit, []*limitView) {
	ms, _ := overrideWindowMs(o)
	limits := rs.plan.Override(int64(o.RequestsPerUnit), ms)
	return limits, []*limitView{newLimitView(rs.name, limits[0].Requests, ms)}
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
		slog.String("event", "RateLimitShadowBlock"), slog.String("domain", rs.plan.Domain),
		slog.String("rule", rs.name), slog.String("key", key), slog.Int64("cost", cost),
		slog.Int64("suppressed", rs.shadowSuppressed.Swap(0)))
}

// journalDecision writes a decision record when the journal is on.
func (e *Enforcer) journalDecision(now int64, seq uint64, i int, domain string, gen int, rs *ruleState, key string, cost int64,
	v engine.Verdict, override *commonv3.RateLimitDescriptor_RateLimitOverride) {
	if e.journal == nil {
		return
	}
	r := journal.DecisionOf(rs.plan.Rule, key, cost, v, rs.mode)
	r.TimeMs, r.Seq, r.Index, r.Domain, r.Gen = now, seq, i, domain, gen
	if override != nil {
		r.OverrideRequests = int64(override.RequestsPerUnit)
		r.OverrideMs, _ = overrideWindowMs(override)
	}
	e.journal.Write(r)
}

// journalUnmatched writes the record of a descriptor no rule matched when the journal is on.
func (e *Enforcer) journalUnmatched(seq uint64, i int, domain string, gen int) {
	if e.journal == nil {
		return
	}
	e.journal.Write(journal.Record{Kind: journal.KindDecision, TimeMs: e.clock.Now(), Seq: seq, Index: i, Gen: gen,
		Domain: domain, Via: journal.ViaUnmatched, Engine: journal.CodeOK, Code: journal.CodeOK})
}
