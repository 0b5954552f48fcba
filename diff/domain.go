package diff

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// domainSettings lists the changes of a domain's own settings: its gateway, its critical paths,
// and sources added, removed, or changed when no head rule uses them (a change of a used source
// is KindDescriptor on its rules).
func domainSettings(bd, hd *policy.Domain) []Change {
	var cs []Change
	add := func(what, before, after string, bp, hp policy.Pos) {
		cs = append(cs, Change{Domain: hd.Name, Kind: KindDomainSetting, Before: before, After: after, Base: bp, Head: hp,
			Summary: hd.Name + ": " + what + " " + orNone(before) + " → " + orNone(after)})
	}
	if b, h := bd.Gateway.RLSTimeoutMs, hd.Gateway.RLSTimeoutMs; b != h {
		add("gateway rls_timeout", duration(b), duration(h), bd.Pos, hd.Pos)
	}
	if b, h := bd.Gateway.PerKeyQPSBudget, hd.Gateway.PerKeyQPSBudget; b != h {
		add("gateway per_key_qps_budget", strconv.FormatInt(b, 10), strconv.FormatInt(h, 10), bd.Pos, hd.Pos)
	}
	if b, h := strings.Join(bd.CriticalPaths, ", "), strings.Join(hd.CriticalPaths, ", "); b != h {
		add("critical_paths", b, h, bd.Pos, hd.Pos)
	}
	if b, h := governanceString(bd.Governance), governanceString(hd.Governance); b != h {
		add("governance", b, h, bd.Governance.Pos, hd.Governance.Pos)
	}
	if b, h := settingString(bd.Rollout), settingString(hd.Rollout); b != h {
		add("rollout", b, h, bd.Pos, hd.Pos)
	}
	used := map[string]bool{}
	for _, r := range hd.Rules {
		for _, k := range usedKeys(r) {
			used[k] = true
		}
	}
	var keys []string
	for _, s := range bd.Sources {
		keys = append(keys, s.Key)
	}
	for _, s := range hd.Sources {
		if bd.Source(s.Key) == nil {
			keys = append(keys, s.Key)
		}
	}
	for _, k := range keys {
		bs, hs := bd.Source(k), hd.Source(k)
		switch {
		case bs == nil:
			add("source "+k, "", hs.Describe(), policy.Pos{}, hs.Pos)
		case hs == nil:
			add("source "+k, bs.Describe(), "", bs.Pos, policy.Pos{})
		case !used[k] && bs.Describe() != hs.Describe():
			add("source "+k+" (no rule uses it)", bs.Describe(), hs.Describe(), bs.Pos, hs.Pos)
		}
	}
	return slices.Clip(cs)
}

// governanceString describes a governance block, "" when it is empty.
func governanceString(g policy.Governance) string {
	if g.ShadowDwellMs == 0 && g.SoftDwellMs == 0 && !g.NewRulesAtShadow && g.OptOutReason == "" && len(g.Removed) == 0 {
		return ""
	}
	s := "dwell shadow " + duration(g.ShadowDwellMs) + ", soft " + duration(g.SoftDwellMs) +
		", new rules at shadow " + strconv.FormatBool(g.NewRulesAtShadow)
	if g.OptOutReason != "" {
		s += " (opt-out: " + g.OptOutReason + ")"
	}
	if len(g.Removed) > 0 {
		var names []string
		for name := range g.Removed {
			names = append(names, name)
		}
		slices.Sort(names)
		s += ", removal reasons for " + strings.Join(names, ", ")
	}
	return s
}

// settingString is a domain settings block as compact JSON (map keys sorted), "" when it is
// empty.
func settingString(v any) string {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "{}" {
		return ""
	}
	return string(b)
}
