package diff

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/rlctl/rlctl/internal/printable"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate"
	"github.com/rlctl/rlctl/simulate/report"
)

// Blast is the blast radius of a change: how the requests of an access log fare under head
// compared with base, request by request. It is part of the JSON form as "blast_radius".
//
// A request is newly denied when some rule rejects it at head (at the rule's stage) and no rule
// rejected it at base; newly admitted is the reverse. Newly would deny and no longer would deny
// count the same at any stage, so a rule in shadow or soft shows what it would do once
// enforced. A request counts once in the totals and once for each rule that decided it so.
type Blast struct {
	Logs     []string `json:"logs"`
	Requests int64    `json:"requests"`
	BadLines int64    `json:"bad_lines"`

	NewlyDenied       int64 `json:"newly_denied"`
	NewlyAdmitted     int64 `json:"newly_admitted"`
	NewlyWouldDeny    int64 `json:"newly_would_deny"`
	NoLongerWouldDeny int64 `json:"no_longer_would_deny"`
	// NATUsers is the number of users behind an address that makes its denials shared-NAT
	// collateral (simulate's --nat-users).
	NATUsers int `json:"nat_users"`
	// Warnings are what the head replay's report warns of (report.Warnings).
	Warnings []string `json:"warnings"`
	// Rules are the rules with any request counted, most newly denied first.
	Rules []BlastRule `json:"rules"`
}

// BlastRule is one rule's part of a blast radius: the requests it newly denies at head, and
// those it denied at base that no rule denies at head. A rule is named as at head (as at base
// when removed).
type BlastRule struct {
	Domain            string `json:"domain"`
	Rule              string `json:"rule"`
	Stage             string `json:"stage"`
	NewlyDenied       int64  `json:"newly_denied"`
	NewlyAdmitted     int64  `json:"newly_admitted"`
	NewlyWouldDeny    int64  `json:"newly_would_deny"`
	NoLongerWouldDeny int64  `json:"no_longer_would_deny"`
	// Top are the identities the rule newly denies, most first (newly denied, then newly would
	// deny).
	Top []Identity `json:"top_newly_denied"`
}

// Identity is one descriptor of a rule, as simulate reports show it, and the requests the
// change newly denies it.
type Identity struct {
	Value          string `json:"value"`
	NewlyDenied    int64  `json:"newly_denied"`
	NewlyWouldDeny int64  `json:"newly_would_deny"`
	// Legit, LegitDenials, Users and UsersCapped mean what they mean in simulate's report
	// (report.Identity), counted over the newly would-deny requests; Note says them in
	// simulate's words (report.Note).
	Legit        bool   `json:"legit"`
	LegitDenials int64  `json:"legit_denials,omitempty"`
	Users        int    `json:"users,omitempty"`
	UsersCapped  bool   `json:"users_capped,omitempty"`
	Note         string `json:"note,omitempty"`
}

// Replayer replays the blast radius's logs through model m with obs as its
// simulate.Config.Observer, normally with simulate.Run, and returns the report. BlastRadius
// calls it twice, base then head, so it must read the same logs from the start each time with
// the same settings.
type Replayer func(ctx context.Context, m *policy.Model, obs simulate.Observer) (*report.Report, error)

// BlastRadius replays the logs through base and then head and compares the outcomes request by
// request, pairing a request by its log and line. top is how many identities to list per rule:
// 0 means 10 and a negative number none, as simulate.Config.TopN.
//
// A uniform store latency draws from one random source for every rule, so a change of one rule
// may move another's figures by a few requests; a fixed latency (simulate's default) does not.
func BlastRadius(ctx context.Context, base, head *policy.Model, top int, replay Replayer) (*Blast, error) {
	bo := &outcomes{byReq: map[request][]verdict{}}
	if _, err := replay(ctx, base, bo); err != nil {
		return nil, fmt.Errorf("replaying base: %w", err)
	}
	ho := &outcomes{byReq: map[request][]verdict{}}
	r, err := replay(ctx, head, ho)
	if err != nil {
		return nil, fmt.Errorf("replaying head: %w", err)
	}
	b := &Blast{Logs: r.Logs, Requests: r.Requests, BadLines: r.BadLines, NATUsers: r.Settings.NATUsers,
		Warnings: report.Warnings(r)}
	if b.Logs == nil {
		b.Logs = []string{}
	}
	if b.Warnings == nil {
		b.Warnings = []string{}
	}
	names := headNames(base, head)
	t := &tally{rules: map[ruleID]*ruleTally{}, stages: map[ruleID]string{}}
	for _, d := range head.Domains {
		for _, r := range d.Rules {
			t.stages[ruleID{d.Name, r.Name}] = stageName(r.Stage)
		}
	}
	for req, hv := range ho.byReq {
		bv := bo.byReq[req]
		hDenied, bDenied := anyDenied(hv), anyDenied(bv)
		if hDenied && !bDenied {
			b.NewlyDenied++
		}
		newlyWould := len(bv) == 0
		if newlyWould {
			b.NewlyWouldDeny++
		}
		for _, v := range hv {
			if v.Denied && !bDenied || newlyWould {
				t.head(v, hDenied && !bDenied, newlyWould)
			}
		}
	}
	for req, bv := range bo.byReq {
		hv := ho.byReq[req]
		bDenied, hDenied := anyDenied(bv), anyDenied(hv)
		if bDenied && !hDenied {
			b.NewlyAdmitted++
		}
		if len(hv) == 0 {
			b.NoLongerWouldDeny++
		}
		for _, v := range bv {
			admitted, noLonger := v.Denied && !hDenied, len(hv) == 0
			if !admitted && !noLonger {
				continue
			}
			rt := t.rule(ruleID{v.Domain, names[v.Rule]}, v.Rule)
			if admitted {
				rt.out.NewlyAdmitted++
			}
			if noLonger {
				rt.out.NoLongerWouldDeny++
			}
		}
	}
	b.Rules = t.finish(top, ho.users)
	return b, nil
}

// request identifies a logged request: its log and line.
type request struct {
	file string
	line int64
}

type verdict = simulate.Denial

// outcomes is a simulate.Observer that keeps every would-deny decision by request.
type outcomes struct {
	byReq map[request][]verdict
	users func(string) (int, bool)
}

func (o *outcomes) Deny(d simulate.Denial) {
	k := request{d.File, d.Line}
	o.byReq[k] = append(o.byReq[k], d)
}

func (o *outcomes) Finish(users func(string) (int, bool)) { o.users = users }

func anyDenied(vs []verdict) bool {
	for _, v := range vs {
		if v.Denied {
			return true
		}
	}
	return false
}

// headNames maps each base rule onto its name at head (pairRules), or its own when removed.
func headNames(base, head *policy.Model) map[*policy.Rule]string {
	names := map[*policy.Rule]string{}
	for _, bd := range base.Domains {
		hd := head.Domain(bd.Name)
		if hd == nil {
			hd = &policy.Domain{Name: bd.Name}
		}
		for _, p := range pairRules(bd, hd) {
			if p.base == nil {
				continue
			}
			names[p.base] = p.base.Name
			if p.head != nil {
				names[p.base] = p.head.Name
			}
		}
	}
	return names
}

type ruleID struct{ domain, rule string }

// tally counts per rule and per identity.
type tally struct {
	rules map[ruleID]*ruleTally
	// stages are the head rules' stages; a rule removed at head shows its base stage.
	stages map[ruleID]string
}

type ruleTally struct {
	out BlastRule
	ids map[string]*identityTally
}

type identityTally struct {
	Identity
	addr string
}

func (t *tally) rule(id ruleID, r *policy.Rule) *ruleTally {
	rt := t.rules[id]
	if rt == nil {
		stage, ok := t.stages[id]
		if !ok {
			stage = stageName(r.Stage)
		}
		rt = &ruleTally{out: BlastRule{Domain: id.domain, Rule: id.rule, Stage: stage}, ids: map[string]*identityTally{}}
		t.rules[id] = rt
	}
	return rt
}

// head counts a head verdict of a request newly denied or newly would-denied.
func (t *tally) head(v verdict, newlyDenied, newlyWould bool) {
	rt := t.rule(ruleID{v.Domain, v.Rule.Name}, v.Rule)
	it := rt.ids[v.Identity]
	if it == nil {
		it = &identityTally{Identity: Identity{Value: v.Identity}, addr: v.Addr}
		rt.ids[v.Identity] = it
	}
	if newlyDenied && v.Denied {
		rt.out.NewlyDenied++
		it.NewlyDenied++
	}
	if newlyWould {
		rt.out.NewlyWouldDeny++
		it.NewlyWouldDeny++
		if v.Legit {
			it.LegitDenials++
		}
	}
}

// finish returns the rules, most newly denied first, each with its top identities.
func (t *tally) finish(top int, users func(string) (int, bool)) []BlastRule {
	if top == 0 {
		top = 10
	}
	out := []BlastRule{}
	for _, rt := range t.rules {
		r := rt.out
		r.Top = []Identity{}
		var ids []*identityTally
		for _, it := range rt.ids {
			ids = append(ids, it)
		}
		slices.SortFunc(ids, func(a, b *identityTally) int {
			return cmp.Or(cmp.Compare(b.NewlyDenied, a.NewlyDenied), cmp.Compare(b.NewlyWouldDeny, a.NewlyWouldDeny),
				cmp.Compare(a.Value, b.Value))
		})
		for _, it := range ids[:max(0, min(top, len(ids)))] {
			id := it.Identity
			id.Legit = id.LegitDenials > 0
			if it.addr != "" && users != nil {
				id.Users, id.UsersCapped = users(it.addr)
			}
			id.Note = report.Note(report.Identity{Legit: id.Legit, LegitDenials: id.LegitDenials, Users: id.Users,
				UsersCapped: id.UsersCapped})
			r.Top = append(r.Top, id)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b BlastRule) int {
		return cmp.Or(cmp.Compare(b.NewlyDenied, a.NewlyDenied), cmp.Compare(b.NewlyAdmitted, a.NewlyAdmitted),
			cmp.Compare(b.NewlyWouldDeny, a.NewlyWouldDeny), cmp.Compare(b.NoLongerWouldDeny, a.NoLongerWouldDeny),
			cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}

// writeBlastText writes the blast radius for WriteText.
func writeBlastText(w io.Writer, b *Blast) {
	fmt.Fprintf(w, "Blast radius: %d requests of %s\n", b.Requests, joinLogs(b.Logs))
	for _, warning := range b.Warnings {
		fmt.Fprintln(w, "  warning:", warning)
	}
	fmt.Fprintf(w, "  newly denied %d, newly admitted %d; at any stage: newly would deny %d, no longer would deny %d\n",
		b.NewlyDenied, b.NewlyAdmitted, b.NewlyWouldDeny, b.NoLongerWouldDeny)
	for _, r := range b.Rules {
		fmt.Fprintf(w, "  %s/%s (%s): newly denied %d, newly admitted %d, newly would deny %d, no longer would deny %d\n",
			r.Domain, r.Rule, r.Stage, r.NewlyDenied, r.NewlyAdmitted, r.NewlyWouldDeny, r.NoLongerWouldDeny)
		for _, id := range r.Top {
			fmt.Fprintf(w, "      %s: newly denied %d, newly would deny %d", printable.String(id.Value), id.NewlyDenied, id.NewlyWouldDeny)
			if id.Note != "" {
				fmt.Fprintf(w, " (%s)", id.Note)
			}
			fmt.Fprintln(w)
		}
	}
}

func joinLogs(logs []string) string {
	switch len(logs) {
	case 0:
		return "no log"
	case 1:
		return logs[0]
	}
	return fmt.Sprintf("%s and %d more logs", logs[0], len(logs)-1)
}
