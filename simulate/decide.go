package simulate

import (
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/report"
)

// decide runs one request of rule rs, whose store key has slot sl, through gateway g's lease
// manager and through the ideal engine, and counts the outcome. shape gives the descriptor's
// sources; s.values their values. It returns whether the rule would deny the request and
// whether, at the rule's stage on g, it would reject it.
func (s *Simulator) decide(ds *domainSim, rs *ruleSim, shape []int, sl *keySlot, g int) (would, denied bool, err error) {
	st := rs.stats
	ks := sl.ks
	if ks == nil || ks.pruned {
		ks = st.keys[sl.key]
		if ks == nil {
			ks = newKeyState(sl.key, len(s.gateways))
			ks.ideal = s.ideal.Handle(ks.key, rs.plan.Limits)
			st.keys[ks.key] = ks
		}
		sl.ks = ks
	}
	now := s.nowUs / 1000
	ks.requests++
	ks.lastMs = now

	p := rs.plan
	if len(ks.leases) <= g { // a gateway added since (Assignment "field")
		ks.leases = append(ks.leases, make([]engine.LeaseHandle, len(s.gateways)-len(ks.leases))...)
	}
	lh := &ks.leases[g]
	if lh.Key() == "" {
		*lh = rs.gateway[g].mgr.Handle(ks.key, p.Limits)
	}
	dec, err := lh.Take(s.ctx, p.Cost)
	if err != nil {
		return false, false, fmt.Errorf("rule %s/%s: %w", p.Domain, rs.rule.Name, err)
	}
	ideal, err := ks.ideal.Take(p.Cost, p.Cost, now)
	if err != nil {
		return false, false, fmt.Errorf("rule %s/%s: ideal: %w", p.Domain, rs.rule.Name, err)
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
		return false, false, nil
	}
	out.WouldDeny++
	st.add(serWouldDeny, b, 1)
	if ks.denials == 0 {
		s.describe(ds, rs, shape, ks)
	}
	ks.denials++
	if denied = s.enforced(rs, g); denied {
		out.Denied++
	}
	if idealOK {
		out.UnderAdmission++
	}
	legit := s.isLegit()
	switch {
	case legit:
		out.LegitDenials++
		ks.legit++
	case ks.addr != "":
		st.natDenials[ks.addr]++
	}
	if o := s.cfg.Observer; o != nil {
		o.Deny(Denial{File: s.rec.File, Line: s.rec.Line, Domain: p.Domain, Rule: rs.rule, Denied: denied,
			Identity: ks.display, Addr: ks.addr, Legit: legit})
	}
	return true, denied, nil
}

// describe fills in what reports say of a key, on its first denial: most keys are never
// denied and need no description. Equal store keys have equal descriptor values (the key
// escapes its parts), so the current request's values describe the key as its first one would.
func (s *Simulator) describe(ds *domainSim, rs *ruleSim, shape []int, ks *keyState) {
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
		if s.oks[i] && s.legitLen(len(v)) && s.legit[v] {
			return true
		}
	}
	return false
}

// legitLen reports whether a legitimate value may have length n: most denied requests' values
// have none of the few lengths, and the test spares them the map lookups.
func (s *Simulator) legitLen(n int) bool {
	return n >= len(s.legitLens)*64 || s.legitLens[n/64]&(1<<(n%64)) != 0
}

// Finish lands the remaining store replies, returns leased tokens and builds the report.
func (s *Simulator) Finish() (*report.Report, error) {
	end := s.nowUs / 1000
	buckets := 0
	if s.started {
		buckets = s.bucket() + 1
		s.lastBucket = buckets - 1
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
		e := s.events.pop()
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
	r.Totals.Matched, r.Totals.RequestsWouldDeny, r.Totals.RequestsDenied = s.matched, s.wouldDeny, s.denied
	r.Reordered, r.FirstReordered, r.AssignMissing = s.reordered, s.firstReordered, s.assign.missing
	r.Totals.RequestsWithUser = s.nat.withUser
	for _, rs := range s.rules {
		r.Rules = append(r.Rules, rs.stats.finish(s.cfg.TopN, s.cfg.NATUsers, s.nat.count, s.startMs, s.bucketMs, buckets))
	}
	r.Finish()
	if o := s.cfg.Observer; o != nil {
		o.Finish(s.nat.count)
	}
	return r, nil
}

// Reordered is the number of records whose time was before an earlier record's; they were
// replayed at the later time.
func (s *Simulator) Reordered() int64 { return s.reordered }
