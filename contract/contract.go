// Package contract owns the contract matrix: every rate-limit rule of a compiled policy as one
// row, saying who it limits (domain and descriptor match), how much (its limits), how far its
// rollout is (stage, since, hold), what it does while the store is unavailable (failure mode,
// reason, fallback), who owns it, how its key is split (sub-shards, regions) and where it is
// declared. It writes the matrix as a terminal table, markdown, JSON or CSV (see Formats); the
// JSON field names are public API.
package contract

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// Row is one rule of the matrix. Its JSON form is documented in rlctl show's help.
type Row struct {
	Domain string  `json:"domain"`
	Rule   string  `json:"rule"`
	Match  []Match `json:"match"`
	Limits []Limit `json:"limits"`
	Stage  Stage   `json:"stage"`
	// Failure is what the rule does while the store is unavailable.
	Failure   Failure    `json:"failure"`
	Owner     string     `json:"owner,omitempty"`
	SubShards *SubShards `json:"sub_shards,omitempty"`
	Regions   []Region   `json:"regions,omitempty"`
	// File, Line and Col are where the rule is declared (its first declaration when it is
	// spread over files).
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

// Match is one level of a rule's descriptor match, outermost first. Kind is exact, wildcard (a
// value ending in '*') or any (no value: any value of the key).
type Match struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
	Kind  string `json:"kind"`
}

// Limit is one limit of a rule; a request must fit all of a rule's limits. Burst is the token
// bucket's capacity, and is absent for the window algorithms, which have none.
type Limit struct {
	Requests  int64  `json:"requests"`
	Window    string `json:"window"`
	WindowMs  int64  `json:"window_ms"`
	Burst     int64  `json:"burst,omitempty"`
	Algorithm string `json:"algorithm"`
	Cost      int64  `json:"cost"`
}

// Stage is where a rule is in its rollout. Percent is set for canary only.
type Stage struct {
	Name    string `json:"name"`
	Percent int    `json:"percent,omitempty"`
	Since   string `json:"since,omitempty"`
	Hold    string `json:"hold,omitempty"`
}

// Failure is a rule's failure mode: "open" admits up to Fallback (or, without one, the engine's
// default bound) while the store is unavailable, "closed" denies.
type Failure struct {
	Mode     string `json:"mode"`
	Reason   string `json:"reason,omitempty"`
	Fallback *Rate  `json:"fallback,omitempty"`
}

// Rate is a plain rate: requests per window.
type Rate struct {
	Requests int64  `json:"requests"`
	Window   string `json:"window"`
	WindowMs int64  `json:"window_ms"`
}

// SubShards says a rule's key is split into Count shard keys by a hash of Attribute.
type SubShards struct {
	Count     int    `json:"count"`
	Attribute string `json:"attribute"`
}

// Region is one region's share of a rule's quota, in percent.
type Region struct {
	Region  string `json:"region"`
	Percent int    `json:"percent"`
}

// Filter selects rows. An empty list selects every value; a non-empty one selects rows whose
// domain (or owner) is one of its values, exactly.
type Filter struct {
	Domains []string
	Owners  []string
}

// Rows returns the rows of m that f selects: domains by name, each domain's rules in precedence
// order (the order in which descriptor lookup tries them).
func Rows(m *policy.Model, f Filter) []Row {
	rows := []Row{}
	for _, d := range m.Domains {
		if len(f.Domains) > 0 && !slices.Contains(f.Domains, d.Name) {
			continue
		}
		for _, r := range d.Rules {
			if len(f.Owners) > 0 && !slices.Contains(f.Owners, r.Owner) {
				continue
			}
			rows = append(rows, row(d, r))
		}
	}
	return rows
}

// Unmatched explains why f selects fewer rules of m than it names, one note a line: each value
// of f that matches nothing, with the values there are (`--owner team-x matches no rule (owners:
// team-a, team-b)`), or, when every value matches but together they select no rule, that.
func Unmatched(m *policy.Model, f Filter) []string {
	var domains, owners []string
	for _, d := range m.Domains {
		domains = append(domains, d.Name)
		for _, r := range d.Rules {
			if r.Owner != "" && !slices.Contains(owners, r.Owner) {
				owners = append(owners, r.Owner)
			}
		}
	}
	slices.Sort(owners)
	var notes []string
	for _, name := range f.Domains {
		if !slices.Contains(domains, name) {
			notes = append(notes, fmt.Sprintf("--domain %s matches no domain (domains: %s)", name, list(domains)))
		}
	}
	for _, owner := range f.Owners {
		if !slices.Contains(owners, owner) {
			notes = append(notes, fmt.Sprintf("--owner %s matches no rule (owners: %s)", owner, list(owners)))
		}
	}
	if len(notes) == 0 && len(f.Domains) > 0 && len(f.Owners) > 0 && len(Rows(m, f)) == 0 {
		notes = append(notes, fmt.Sprintf("no rule of domain %s has owner %s",
			strings.Join(f.Domains, " or "), strings.Join(f.Owners, " or ")))
	}
	return notes
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func row(d *policy.Domain, r *policy.Rule) Row {
	out := Row{
		Domain: d.Name,
		Rule:   r.Name,
		Match:  []Match{},
		Limits: []Limit{},
		Stage:  Stage{Name: string(r.Stage.Name), Since: r.Stage.Since, Hold: r.Stage.Hold},
		Failure: Failure{
			Mode:   string(r.FailureMode),
			Reason: r.FailureReason,
		},
		Owner: r.Owner,
		File:  r.Pos.File,
		Line:  r.Pos.Line,
		Col:   r.Pos.Col,
	}
	if out.Stage.Name == "" {
		out.Stage.Name = string(policy.StageEnforce)
	}
	if r.Stage.Name == policy.StageCanary {
		out.Stage.Percent = r.Stage.CanaryPercent
	}
	for _, m := range r.Match {
		out.Match = append(out.Match, Match{Key: m.Key, Value: m.Value, Kind: string(m.Kind)})
	}
	for _, l := range r.Limits {
		lim := Limit{
			Requests:  l.Requests,
			Window:    schema.FormatDuration(l.WindowMs),
			WindowMs:  l.WindowMs,
			Algorithm: string(l.Algorithm),
			Cost:      l.Cost,
		}
		if l.Algorithm == policy.TokenBucket || l.Algorithm == "" {
			lim.Algorithm = string(policy.TokenBucket)
			lim.Burst = l.Burst
		}
		out.Limits = append(out.Limits, lim)
	}
	if fb := r.Fallback; fb != nil {
		out.Failure.Fallback = &Rate{Requests: fb.Requests, Window: schema.FormatDuration(fb.WindowMs), WindowMs: fb.WindowMs}
	}
	if ss := r.SubShards; ss != nil {
		out.SubShards = &SubShards{Count: ss.Count, Attribute: ss.Attribute}
	}
	for _, reg := range r.Regions {
		out.Regions = append(out.Regions, Region{Region: reg.Region, Percent: reg.Percent})
	}
	return out
}
