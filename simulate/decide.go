package simulate

import (
	"container/heap"
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/report"
)

// decide runs one request of rule rs through gateway g's lease manager and through the ideal
// engine, and counts the outcome. shape gives the descriptor's sources; s.values their values.
func (s *Simulator) decide(ds *domainSim, rs *ruleSim, shape []int, g int) error {
	if len(shape) != rs.descriptorLen() {
		return nil // the rule's own shape decides it; a shorter or longer one must not count twice
	}
	s.keyBuf = engine.AppendRuleKey(s.keyBuf[:0], ds.d.Name, rs.rule, s.entries)
	st := rs.stats
	ks := st.keys[string(s.keyBuf)]
	if ks == nil {
		ks = s.newKey(ds, rs, shape)
		st.keys[ks.key] = ks
	}
	now := s.nowUs / 1000
	ks.requests++
	ks.lastMs = now

	p := rs.plan
	if len(ks.leases) <= g {
		ks.leases = append(ks.leases, make([]engine.LeaseHandle, len(s.gateways)-len(ks.leases))...)
	}
	lh := &ks.leases[g]
	if lh.Key() == "" {
		*lh = rs.gateway[g].mgr.Handle(ks.key, p.Limits)
	}
	dec, err := lh.Take(s.ctx, p.Cost)
	if err != nil {
		return fmt.Errorf("simulate: rule %s/%s: %w", p.Domain, rs.rule.Name, err)
	}
	ideal, err := ks.ideal.Take(p.Cost, p.Cost, now)
	if err != nil {
		return fmt.Errorf("simulate: rule %s/%s: ideal: %w", p.Domain, rs.rule.Name, err)
	}
	idealOK := ideal.Granted > 0
	b := s.bucket()
	out := &st.out
	out.Requests++
	st.add(serRequests, b, 1)
	if !idealOK {
		out.IdealDeny++
		st.add(serIdealDeny, b, 1)
	}
	if dec.OK {
		if !idealOK {
			out.OverAdmission++
		}
		return nil
	}
	out.WouldDeny++
	st.add(serWouldDeny, b, 1)
	ks.denials++
	if s.enforced(rs, g) {
		out.Denied++
	}
	if idealOK {
		out.UnderAdmission++
	}
	switch {
	case s.isLegit():
		out.LegitDenials++
		ks.legit++
	case ks.addr != "":
		st.natDenials[ks.addr]++
	}
	return nil
}

// newKey describes a new rate-limit key for reports.
func (s *Simulator) newKey(ds *domainSim, rs *ruleSim, shape []int) *keyState {
	ks := &keyState{key: string(s.keyBuf)}
	ks.ideal = s.ideal.Handle(ks.key, rs.plan.Limits)
	var b strings.Builder
	for n, i := range shape {
		src := ds.d.Sources[i]
		v := s.values[i]
		if n == rs.depth {
			fmt.Fprintf(&b, ", shard=%d", engine.ShardOf(v, rs.plan.Shards))
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(src.Key)
		b.WriteByte('=')
		b.WriteString(v)
		if ks.addr == "" {
			switch {
			case src.Kind == policy.SourceRemoteAddress:
				ks.addr = strings.Clone(v)
			case src.Kind == policy.SourceIdentity && strings.HasPrefix(v, string(policy.TierSubnet)+":"):
				ks.addr = strings.Clone(v[len(policy.TierSubnet)+1:])
			}
		}
	}
	ks.display = b.String()
	return ks
}

// enforced reports whether rs rejects on gateway g given its stage.
func (s *Simulator) enforced(rs *ruleSim, g int) bool {
	return rs.rule.Mode(s.gateways[g].name) == policy.ModeEnforce
}

// isLegit reports whether any descriptor value of the current request is marked legitimate.
func (s *Simulator) isLegit() bool {
	if len(s.legit) == 0 {
		return false
	}
	for i, v := range s.values {
		if s.oks[i] && s.legit[v] {
			return true
		}
	}
	return false
}

// Finish lands the remaining store replies, returns leased tokens and builds the report.
func (s *Simulator) Finish() (*report.Report, error) {
	end := s.nowUs / 1000
	buckets := 0
	if s.started {
		buckets = s.bucket() + 1
	}
	for _, rs := range s.rules {
		var stranded int64
		for _, g := range rs.gateway {
			stranded += g.mgr.Stranded()
		}
		rs.stats.out.StrandedEnd = stranded
		rs.stats.out.StrandedMax = max(rs.stats.out.StrandedMax, stranded)
	}
	for len(s.events) > 0 {
		e := heap.Pop(&s.events).(event)
		s.nowUs = max(s.nowUs, e.atUs)
		e.fn(s.ctx)
	}
	r := &report.Report{
		Requests: s.requests,
		StartMs:  s.startMs,
		EndMs:    end,
		Settings: report.Settings{Gateways: len(s.gateways), Assignment: s.cfg.Assign.String(),
			StoreLatency: s.cfg.Latency.String(), NATUsers: s.cfg.NATUsers, BucketMs: s.bucketMs},
	}
	r.Totals.Matched = s.matched
	for _, rs := range s.rules {
		r.Rules = append(r.Rules, rs.stats.finish(s.cfg.TopN, s.cfg.NATUsers, s.nat.count, s.startMs, s.bucketMs, buckets))
	}
	r.Finish()
	return r, nil
}

// Reordered is the number of records whose time was before an earlier record's; they were
// replayed at the later time.
func (s *Simulator) Reordered() int64 { return s.reordered }
