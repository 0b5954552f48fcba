package diff

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Summary counts what a change list adds, changes and removes: rules, and domains (a Change
// with an empty Rule). A rule or domain with any change other than added or removed is changed.
type Summary struct {
	Added   int `json:"added"`
	Changed int `json:"changed"`
	Removed int `json:"removed"`
	// Changes is the number of changes.
	Changes int `json:"changes"`
}

// Summarize counts cs.
func Summarize(cs []Change) Summary {
	type thing struct{ domain, rule string }
	state := map[thing]Kind{}
	var order []thing
	for _, c := range cs {
		t := thing{c.Domain, c.Rule}
		k, seen := state[t]
		if !seen {
			order = append(order, t)
		}
		if !seen || k != KindAdded && k != KindRemoved {
			state[t] = c.Kind
		}
	}
	s := Summary{Changes: len(cs)}
	for _, t := range order {
		switch state[t] {
		case KindAdded:
			s.Added++
		case KindRemoved:
			s.Removed++
		default:
			s.Changed++
		}
	}
	return s
}

// String is the summary line: "Plan: 1 added, 2 changed, 0 removed." or "No changes.".
func (s Summary) String() string {
	if s.Changes == 0 {
		return "No changes."
	}
	return "Plan: " + s.counts() + "."
}

// counts is "1 added, 2 changed, 0 removed", or "no changes".
func (s Summary) counts() string {
	if s.Changes == 0 {
		return "no changes"
	}
	return fmt.Sprintf("%d added, %d changed, %d removed", s.Added, s.Changed, s.Removed)
}

// An Option adds to what WriteText, WriteJSON and WriteMarkdown write.
type Option func(*options)

type options struct {
	blast    *Blast
	sections []Section
}

// WithBlast adds a blast radius (BlastRadius) after the changes.
func WithBlast(b *Blast) Option { return func(o *options) { o.blast = b } }

// Section is more markdown for WriteMarkdown to add after the changes and the blast radius,
// such as a rollout's gate evidence. The text and JSON forms leave it out.
type Section struct {
	// Title becomes a heading; Markdown is the body as it is.
	Title, Markdown string
}

// WithSection adds s to the markdown form.
func WithSection(s Section) Option { return func(o *options) { o.sections = append(o.sections, s) } }

func optionsOf(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// sign marks a change in the text and markdown forms: + added, - removed, ~ changed.
func sign(k Kind) string {
	switch k {
	case KindAdded:
		return "+"
	case KindRemoved:
		return "-"
	}
	return "~"
}

// WriteText writes cs terraform-plan style: the changes of each domain under its name, each a
// line "SIGN SUMMARY  [KIND]" (+ added, - removed, ~ changed) over a line of its positions,
// then the blast radius when given, and the summary line last.
//
//	edge_gateway_limits
//	  ~ shopify_payments: 200/s → 150/s (−25%)  [limit_tightened]
//	      base policies/tenants.cue:10 → head policies/tenants.cue:10
//
//	Plan: 0 added, 1 changed, 0 removed.
func WriteText(w io.Writer, cs []Change, opts ...Option) error {
	o := optionsOf(opts)
	bw := bufio.NewWriter(w)
	for i, c := range cs {
		if i == 0 || c.Domain != cs[i-1].Domain {
			if i > 0 {
				fmt.Fprintln(bw)
			}
			fmt.Fprintln(bw, c.Domain)
		}
		fmt.Fprintf(bw, "  %s %s  [%s]\n", sign(c.Kind), c.Summary, c.Kind)
		if p := positions(c); p != "" {
			fmt.Fprintf(bw, "      %s\n", p)
		}
	}
	if len(cs) > 0 {
		fmt.Fprintln(bw)
	}
	if o.blast != nil {
		writeBlastText(bw, o.blast)
		fmt.Fprintln(bw)
	}
	fmt.Fprintln(bw, Summarize(cs))
	return bw.Flush()
}

// positions writes where a change is: "base FILE:LINE → head FILE:LINE", or one side.
func positions(c Change) string {
	b, h := position(c.Base), position(c.Head)
	switch {
	case b == "" && h == "":
		return ""
	case b == "":
		return "head " + h
	case h == "":
		return "base " + b
	}
	return "base " + b + " → head " + h
}

// document is the JSON form.
type document struct {
	Changes []Change `json:"changes"`
	Summary Summary  `json:"summary"`
	Blast   *Blast   `json:"blast_radius,omitempty"`
}

// WriteJSON writes cs as indented JSON:
//
//	{"changes": [{"domain", "rule", "kind", "summary", "before", "after", "percent",
//	              "base": {"file", "line", "col"}, "head": {...}}],
//	 "summary": {"added", "changed", "removed", "changes"},
//	 "blast_radius": {...}}
//
// "rule" is "" for a change of the domain; "before", "after" and "percent" are left out where
// they do not apply, and a position is {} on the side where the value does not exist.
// "blast_radius" (Blast) is there only when given.
func WriteJSON(w io.Writer, cs []Change, opts ...Option) error {
	o := optionsOf(opts)
	if cs == nil {
		cs = []Change{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(document{Changes: cs, Summary: Summarize(cs), Blast: o.blast})
}
