package diff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// The text of the model's values, as Before, After and Summary show them.

// rate writes a limit's rate: "200/s" for a one-unit window, "5/10s" otherwise.
func rate(requests, windowMs int64) string {
	w := duration(windowMs)
	if u, ok := strings.CutPrefix(w, "1"); ok && (u == "s" || u == "m" || u == "h" || u == "d") {
		w = u
	}
	return strconv.FormatInt(requests, 10) + "/" + w
}

// duration writes milliseconds in the largest unit that divides them: "250ms", "2s", "1m".
func duration(ms int64) string {
	for _, u := range []struct {
		ms   int64
		name string
	}{{86_400_000, "d"}, {3_600_000, "h"}, {60_000, "m"}, {1000, "s"}} {
		if ms != 0 && ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.name
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

// limitString writes a limit with what differs from the defaults: "5/s burst 25 fixed_window".
func limitString(l policy.Limit) string {
	s := rate(l.Requests, l.WindowMs)
	if l.Burst != 0 && l.Burst != l.Requests {
		s += " burst " + strconv.FormatInt(l.Burst, 10)
	}
	if l.Algorithm != "" && l.Algorithm != policy.TokenBucket {
		s += " " + string(l.Algorithm)
	}
	if l.Cost > 1 {
		s += " cost " + strconv.FormatInt(l.Cost, 10)
	}
	return s
}

// ruleString sums a rule up for an added or removed rule: "200/s, enforce, fail closed".
func ruleString(r *policy.Rule) string {
	var limits []string
	for _, l := range r.Limits {
		limits = append(limits, limitString(l))
	}
	s := strings.Join(limits, " + ") + ", " + stageString(r.Stage)
	if r.FailureMode == policy.FailClosed {
		s += ", fail closed"
	}
	return s
}

// stageOrder places a stage in the rollout order; an empty stage enforces.
func stageOrder(n policy.StageName) int {
	switch n {
	case policy.StageShadow:
		return 0
	case policy.StageSoft:
		return 1
	case policy.StageCanary:
		return 2
	}
	return 3
}

func stageName(s policy.Stage) string {
	if s.Name == "" {
		return string(policy.StageEnforce)
	}
	if s.Name == policy.StageCanary {
		return fmt.Sprintf("canary %d%%", s.CanaryPercent)
	}
	return string(s.Name)
}

// stageString writes a stage with its date: "canary 10% since 2025-03-01".
func stageString(s policy.Stage) string {
	if s.Since == "" {
		return stageName(s)
	}
	return stageName(s) + " since " + s.Since
}

// matchString writes a rule's match: "tenant_id=shopify, path=/v1/*, client (any)".
func matchString(ms []policy.Match) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		if m.Kind == policy.MatchAny {
			parts[i] = m.Key + " (any)"
		} else {
			parts[i] = m.Key + "=" + m.Value
		}
	}
	return strings.Join(parts, ", ")
}

func leaseString(l policy.Lease) string {
	parts := leaseFields(l)
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = p.name + " " + p.value
	}
	return strings.Join(s, ", ")
}

type field struct{ name, value string }

func leaseFields(l policy.Lease) []field {
	wm := strconv.FormatInt(l.LowWatermark, 10)
	if l.LowWatermark == 0 && l.LowWatermarkPercent != 0 {
		wm = strconv.FormatInt(l.LowWatermarkPercent, 10) + "%"
	}
	return []field{{"min", strconv.FormatInt(l.Min, 10)}, {"max", strconv.FormatInt(l.Max, 10)},
		{"lookahead", duration(l.LookaheadMs)}, {"low_watermark", wm}, {"ttl", duration(l.TTLMs)}}
}

func subShardsString(s *policy.SubShards) string {
	if s == nil || s.Count <= 1 {
		return "none"
	}
	return fmt.Sprintf("%d by %s", s.Count, s.Attribute)
}

// regionsString writes regional shares by region name: "eu-central 30%, us-east 70%".
func regionsString(rs []policy.RegionShare) string {
	if len(rs) == 0 {
		return "none"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprintf("%s %d%%", r.Region, r.Percent)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

func fallbackString(r *policy.Rate) string {
	if r == nil {
		return "default"
	}
	return rate(r.Requests, r.WindowMs)
}

// basisPoints writes basis points as a percent: 200 is "2%", 250 "2.5%".
func basisPoints(bp int64) string {
	return trimZeros(fmt.Sprintf("%d.%02d", bp/100, bp%100)) + "%"
}

// trimZeros drops a decimal number's trailing zeros and a trailing point.
func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// position writes a position as file:line, the form reviews show.
func position(p policy.Pos) string {
	if p.File == "" {
		return ""
	}
	if p.Line == 0 {
		return p.File
	}
	return p.File + ":" + strconv.Itoa(p.Line)
}
