package diff

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// ruleDiff collects the changes of one rule present on both sides.
type ruleDiff struct {
	domain string
	b, h   *policy.Rule
	cs     []Change
}

// add records a change of kind from before to after at the rule's positions.
func (d *ruleDiff) add(kind Kind, what, before, after string) *Change {
	return d.addAt(kind, what, before, after, d.b.Pos, d.h.Pos)
}

// addSetting records a change of one of the rule's settings (a policy.Setting constant) at
// where each side writes it: in the rule, or in the domain's defaults it takes it from.
func (d *ruleDiff) addSetting(kind Kind, setting, what, before, after string) *Change {
	return d.addAt(kind, what, before, after, d.b.PosOf(setting), d.h.PosOf(setting))
}

// addAt records a change at the given positions. what names the value ("failure mode"); the
// summary is "RULE: what BEFORE → AFTER".
func (d *ruleDiff) addAt(kind Kind, what, before, after string, bp, hp policy.Pos) *Change {
	s := d.h.Name + ": "
	if what != "" {
		s += what + " "
	}
	d.cs = append(d.cs, Change{Domain: d.domain, Rule: d.h.Name, Kind: kind, Before: before, After: after,
		Base: bp, Head: hp, Summary: s + orNone(before) + " → " + orNone(after)})
	return &d.cs[len(d.cs)-1]
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// compareRule lists the changes of rule b at base to h at head, in any order.
func compareRule(bd, hd *policy.Domain, b, h *policy.Rule) []Change {
	d := &ruleDiff{domain: hd.Name, b: b, h: h}
	if b.Name != h.Name {
		d.cs = append(d.cs, Change{Domain: hd.Name, Rule: h.Name, Kind: KindRenamed, Before: b.Name, After: h.Name,
			Base: b.Pos, Head: h.Pos, Summary: h.Name + ": renamed from " + b.Name})
	}
	if policy.MatchKey(b.Match) != policy.MatchKey(h.Match) {
		d.addAt(KindMatch, "match", matchString(b.Match), matchString(h.Match), matchPos(b), matchPos(h))
	}
	d.descriptors(bd, hd)
	d.limits()
	d.stage()
	if b.FailureMode != h.FailureMode {
		d.addSetting(KindFailureMode, policy.SettingFailure, "failure mode", string(b.FailureMode), string(h.FailureMode))
	}
	if b.FailureReason != h.FailureReason {
		d.addSetting(KindFailureReason, policy.SettingFailure, "failure reason", strconv.Quote(b.FailureReason), strconv.Quote(h.FailureReason))
	}
	if fb, fh := fallbackString(b.Fallback), fallbackString(h.Fallback); fb != fh {
		d.addSetting(KindFallback, policy.SettingFailure, "fallback", fb, fh)
	}
	if b.StoreTimeoutMs != h.StoreTimeoutMs {
		d.addSetting(KindStoreTimeout, policy.SettingStoreTimeout, "store timeout", duration(b.StoreTimeoutMs), duration(h.StoreTimeoutMs))
	}
	d.lease()
	if sb, sh := subShardsString(b.SubShards), subShardsString(h.SubShards); sb != sh {
		d.add(KindSubShards, "sub-shards", sb, sh)
	}
	if rb, rh := regionsString(b.Regions), regionsString(h.Regions); rb != rh {
		d.addSetting(KindRegions, policy.SettingRegions, "regions", rb, rh)
	}
	if b.Owner != h.Owner {
		d.add(KindOwner, "owner", b.Owner, h.Owner)
	}
	if b.ExpectedPeakQPS != h.ExpectedPeakQPS {
		d.addSetting(KindCapacity, policy.SettingExpectedPeakQPS, "expected peak QPS", count(b.ExpectedPeakQPS), count(h.ExpectedPeakQPS))
	}
	if b.Gateways != h.Gateways {
		d.add(KindCapacity, "gateways", count(b.Gateways), count(h.Gateways))
	}
	if b.DriftToleranceBP != h.DriftToleranceBP {
		d.add(KindDriftTolerance, "drift tolerance", basisPoints(b.DriftToleranceBP), basisPoints(h.DriftToleranceBP))
	}
	d.legit()
	return d.cs
}

// count writes a capacity figure, "" when it is not set.
func count(n int64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

func matchPos(r *policy.Rule) policy.Pos {
	if len(r.Match) > 0 && r.Match[0].Pos.File != "" {
		return r.Match[0].Pos
	}
	return r.Pos
}

// descriptors reports each source the head rule uses whose definition changed.
func (d *ruleDiff) descriptors(bd, hd *policy.Domain) {
	for _, key := range usedKeys(d.h) {
		bs, hs := bd.Source(key), hd.Source(key)
		if bs == nil || hs == nil {
			continue
		}
		if b, h := bs.Describe(), hs.Describe(); b != h {
			d.addAt(KindDescriptor, "descriptor "+key+":", b, h, bs.Pos, hs.Pos)
		}
	}
}

// usedKeys are the descriptor keys a rule's descriptor carries: its match keys and its
// sub-shard attribute.
func usedKeys(r *policy.Rule) []string {
	var keys []string
	for _, m := range r.Match {
		keys = append(keys, m.Key)
	}
	if r.SubShards != nil && r.SubShards.Attribute != "" {
		keys = append(keys, r.SubShards.Attribute)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// limits compares the rule's limits, paired as the package doc says.
func (d *ruleDiff) limits() {
	several := len(d.b.Limits) > 1 || len(d.h.Limits) > 1
	for _, p := range policy.PairLimits(d.b.Limits, d.h.Limits) {
		what := ""
		if several {
			what = "limit " + strconv.Itoa(p.Index+1)
		}
		switch {
		case p.Base == nil:
			c := d.addAt(KindLimitTightened, "", "", limitString(*p.Head), policy.Pos{}, cmpPos(p.Head.Pos, d.h.Pos))
			c.Summary = d.h.Name + ": limit " + limitString(*p.Head) + " added"
			continue
		case p.Head == nil:
			c := d.addAt(KindLimitLoosened, "", limitString(*p.Base), "", cmpPos(p.Base.Pos, d.b.Pos), policy.Pos{})
			c.Summary = d.h.Name + ": limit " + limitString(*p.Base) + " removed"
			continue
		}
		b, h := *p.Base, *p.Head
		bp, hp := cmpPos(b.Pos, d.b.Pos), cmpPos(h.Pos, d.h.Pos)
		rb, rh := big.NewRat(b.Requests, b.WindowMs), big.NewRat(h.Requests, h.WindowMs)
		if c := rh.Cmp(rb); c != 0 {
			kind := KindLimitLoosened
			if c < 0 {
				kind = KindLimitTightened
			}
			ch := d.addAt(kind, what, rate(b.Requests, b.WindowMs), rate(h.Requests, h.WindowMs), bp, hp)
			var text string
			ch.Percent, text = percent(rh, rb)
			ch.Summary += " (" + text + ")"
		}
		if b.WindowMs != h.WindowMs {
			d.addAt(KindWindow, strings.TrimSpace(what+" window"), duration(b.WindowMs), duration(h.WindowMs), bp, hp)
		}
		// A burst that follows its requests changes with them: a new rate in the same window
		// shows as the rate alone. In another window it is news of its own: 600/1m → 10/1s is
		// the same rate, and a key can spend 10 at once where it could spend 600.
		if b.Burst != h.Burst && (b.Burst != b.Requests || h.Burst != h.Requests || b.WindowMs != h.WindowMs) {
			ch := d.addAt(KindBurst, strings.TrimSpace(what+" burst"), strconv.FormatInt(b.Burst, 10), strconv.FormatInt(h.Burst, 10), bp, hp)
			var text string
			ch.Percent, text = percent(big.NewRat(h.Burst, 1), big.NewRat(b.Burst, 1))
			ch.Summary += " (" + text + ")"
		}
		if b.Algorithm != h.Algorithm {
			d.addAt(KindAlgorithm, strings.TrimSpace(what+" algorithm"), string(b.Algorithm), string(h.Algorithm), bp, hp)
		}
		if b.Cost != h.Cost {
			d.addAt(KindCost, strings.TrimSpace(what+" cost"), strconv.FormatInt(b.Cost, 10), strconv.FormatInt(h.Cost, 10), bp, hp)
		}
	}
}

func cmpPos(p, def policy.Pos) policy.Pos {
	if p.File == "" {
		return def
	}
	return p
}

// stage reports a move between stages, a canary percent or a new since date, and a hold set,
// changed or lifted (rlctl rollout pause and resume).
func (d *ruleDiff) stage() {
	b, h := d.b.Stage, d.h.Stage
	bp, hp := cmpPos(b.Pos, d.b.Pos), cmpPos(h.Pos, d.h.Pos)
	if b.Hold != h.Hold {
		before, after := b.Hold, h.Hold
		if before != "" {
			before = strconv.Quote(before)
		}
		if after != "" {
			after = strconv.Quote(after)
		}
		d.addAt(KindStageHold, "hold", before, after, bp, hp)
	}
	ob, oh := stageOrder(b.Name), stageOrder(h.Name)
	var kind Kind
	switch {
	case oh == ob+1:
		kind = KindStageAdvanced
	case oh > ob+1:
		kind = KindStageSkipped
	case oh < ob:
		kind = KindStageRolledBack
	case h.Name == policy.StageCanary && h.CanaryPercent > b.CanaryPercent:
		kind = KindStageAdvanced
	case h.Name == policy.StageCanary && h.CanaryPercent < b.CanaryPercent:
		kind = KindStageRolledBack
	case b.Since != h.Since:
		d.addAt(KindStageSince, stageName(h)+" since", b.Since, h.Since, bp, hp)
		return
	default:
		return
	}
	d.addAt(kind, "stage", stageString(b), stageString(h), bp, hp)
}

// lease reports the lease settings that changed, all in one change.
func (d *ruleDiff) lease() {
	fb, fh := leaseFields(d.b.Lease), leaseFields(d.h.Lease)
	var changed []string
	for i := range fb {
		if fb[i] != fh[i] {
			changed = append(changed, fmt.Sprintf("%s %s → %s", fb[i].name, fb[i].value, fh[i].value))
		}
	}
	if len(changed) > 0 {
		c := d.add(KindLease, "", leaseString(d.b.Lease), leaseString(d.h.Lease))
		c.Summary = d.h.Name + ": lease " + strings.Join(changed, ", ")
	}
}

// legit reports identities marked legitimate that were added or dropped.
func (d *ruleDiff) legit() {
	var changed []string
	for _, v := range d.h.Legit {
		if !slices.Contains(d.b.Legit, v) {
			changed = append(changed, "+"+v)
		}
	}
	for _, v := range d.b.Legit {
		if !slices.Contains(d.h.Legit, v) {
			changed = append(changed, "\u2212"+v)
		}
	}
	if len(changed) > 0 {
		c := d.add(KindLegit, "", strings.Join(d.b.Legit, ", "), strings.Join(d.h.Legit, ", "))
		c.Summary = d.h.Name + ": legit " + strings.Join(changed, " ")
	}
}
