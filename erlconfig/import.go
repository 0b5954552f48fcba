package erlconfig

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"cuelang.org/go/cue/format"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/printable"
	"github.com/rlctl/rlctl/policy"
)

// File is one CUE policy file that Import wrote, named after its domain (see FileName).
type File struct {
	Name string
	Data []byte
}

// Import converts parsed ERL configurations into CUE policy files, one per domain, formatted by
// cue/format, in the order of cfgs. Rendering the imported policy with FromModel gives the same
// descriptor tree and limits back.
//
//   - Every descriptor with a rate_limit becomes a rule whose match is the descriptor's path, with
//     one limit of requests_per_unit per unit: algorithm fixed_window, so that behaviour is kept,
//     and a window of 1s, 1m, 1h, 1d, 7d (week), 30d (month) or 365d (year). Its name is the
//     rate_limit's name, else the key path (tenant_acme_path); both made valid rule names and
//     unique.
//   - shadow_mode becomes the shadow stage; quota_mode, which admits a request over the limit and
//     reports it, becomes the soft stage (a note says so).
//   - Each descriptor key becomes a source with a TODO comment: ERL's YAML does not record how
//     Envoy fills a key. "remote_address" becomes a remote_address source (the key Envoy's
//     remote_address action sends); any other key a header source of a placeholder header named
//     after it. A generic_key source would be the obvious placeholder, but it produces one fixed
//     value for every request, so that lint and simulate would find no request for any rule
//     matching another value.
//   - A '*' inside a value (not at its end) is a literal character in ERL and in rlctl alike: it
//     is imported as it is, with a note.
//   - unlimited, and a descriptor with neither a rate_limit nor descriptors below it, admit
//     without a limit: they become no rule (a request that matches no rule is admitted), with a
//     note and a comment in the CUE. When such a descriptor exempts values from a sibling's
//     limit (a key-only or an overlapping wildcard sibling would otherwise take them), rlctl has
//     no equivalent and Import refuses it.
//
// Import refuses, each at its file:line:col: a domain given twice, a domain or key that is not a
// valid rlctl name, replaces, detailed_metric, value_to_metric and share_threshold (rlctl has no
// equivalent), requests_per_unit 0 or none, and a limit beyond the engine's exact integer range
// (engine.Limit.ExactRangeOK: over 285,615 per year, say). The error is a policy.Problems holding every problem;
// then no file is returned. notes are what was imported with a caveat.
func Import(cfgs []*Config) (files []File, notes policy.Problems, err error) {
	im := &importer{domains: map[string]policy.Pos{}}
	var out []*domainImport
	for _, c := range cfgs {
		if prev, ok := im.domains[c.Domain]; ok {
			im.problem(c.Pos, []policy.Pos{prev}, "domain %q is given twice", c.Domain)
			continue
		}
		im.domains[c.Domain] = c.Pos
		if !validName.MatchString(c.Domain) {
			im.problem(c.Pos, nil, "domain %q is not a valid rlctl domain name: %s", c.Domain, nameRule)
		}
		di := &domainImport{cfg: c, keyPos: map[string]policy.Pos{}}
		im.walk(di, c.Descriptors, nil)
		for _, x := range crossKeyMatches(c.Descriptors, paths(c.Descriptors, nil, nil)) {
			im.note(x.d.Pos, "ERL also matches %s to this descriptor, since it looks an entry up by its key and value joined with '_'; rlctl matches an entry by its key, so it limits those requests otherwise",
				x.which)
		}
		lists := make([][]policy.Match, len(di.rules))
		for i, r := range di.rules {
			lists[i] = r.match
		}
		for _, x := range counterClashes(lists) {
			ri, rj := di.rules[x.i], di.rules[x.j]
			what := fmt.Sprintf("%s and %s", entriesText(ri.match, x.a), entriesText(rj.match, x.b))
			if x.i != x.j {
				what = fmt.Sprintf("%s and the descriptor %s at %s", entriesText(rj.match, x.b), entriesText(ri.match, x.a), shortPos(ri.pos))
			}
			im.note(rj.pos, "ERL counts %s in one Redis key: %s; rlctl keeps them apart", what, counterWhy)
		}
		di.name()
		out = append(out, di)
	}
	if len(im.probs) > 0 {
		im.probs.Sort()
		return nil, nil, im.probs
	}
	for _, di := range out {
		data, err := format.Source(di.cue())
		if err != nil {
			return nil, nil, fmt.Errorf("erlconfig: formatting the CUE of domain %s: %w", di.cfg.Domain, err)
		}
		files = append(files, File{Name: FileName(di.cfg.Domain), Data: data})
	}
	im.notes.Sort()
	return files, im.notes, nil
}

// FileName returns the name of the file Import writes domain's policy to: DOMAIN.cue, with a
// leading '_' or '.', and each byte other than a letter, digit, '_', '.' or '-', written as '%'
// and two hexadecimal digits. The policy loader skips files whose name starts with '_' or '.',
// so the domain _internal is written to %5Finternal.cue. No domain name holds a '%', so two
// domains never share a file name.
func FileName(domain string) string {
	var b strings.Builder
	for i := 0; i < len(domain); i++ {
		c := domain[i]
		switch {
		case i == 0 && (c == '_' || c == '.'):
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String() + ".cue"
}

// paths appends to out the keys of the path to each descriptor of ds (below a path of keys
// prefix): the shapes of descriptor that the configuration limits, and so that Envoy sends.
func paths(ds []Descriptor, prefix []string, out [][]string) [][]string {
	for _, d := range ds {
		p := append(prefix[:len(prefix):len(prefix)], d.Key)
		out = paths(d.Descriptors, p, append(out, p))
	}
	return out
}

// validName is what rlctl requires of a domain, rule or source name and of a match key.
var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

const nameRule = "a name starts with a letter or '_' and holds only letters, digits, '_', '.' and '-'"

type importer struct {
	domains map[string]policy.Pos
	probs   policy.Problems
	notes   policy.Problems
}

func (im *importer) problem(pos policy.Pos, related []policy.Pos, format string, args ...any) {
	im.probs = append(im.probs, policy.Problem{Pos: pos, Related: related, Message: fmt.Sprintf(format, args...)})
}

func (im *importer) note(pos policy.Pos, format string, args ...any) {
	im.notes = append(im.notes, policy.Problem{Pos: pos, Message: fmt.Sprintf(format, args...)})
}

type domainImport struct {
	cfg    *Config
	keys   []string // in order of first use
	keyPos map[string]policy.Pos
	rules  []*importedRule
	// comments are lines for the rules block: descriptors that became no rule.
	comments []string
}

type importedRule struct {
	name     string // from rate_limit.name, "" until named
	match    []policy.Match
	requests uint32
	unit     Unit
	stage    policy.StageName
	pos      policy.Pos
}

func (im *importer) walk(di *domainImport, ds []Descriptor, path []policy.Match) {
	for i := range ds {
		d := &ds[i]
		if !validName.MatchString(d.Key) {
			im.problem(d.Fields["key"], nil, "descriptor key %q is not a valid rlctl key: %s", d.Key, nameRule)
		}
		if level := slices.IndexFunc(path, func(m policy.Match) bool { return m.Key == d.Key }); level >= 0 {
			im.problem(d.Fields["key"], nil, "descriptor key %q is at levels %d and %d: rlctl gives a key one source, with one value per request; "+
				"give one level another key, in Envoy's rate_limits action (descriptor_key) and here", d.Key, level+1, len(path)+1)
		}
		if _, ok := di.keyPos[d.Key]; !ok {
			di.keyPos[d.Key] = d.Pos
			di.keys = append(di.keys, d.Key)
		}
		for _, f := range []struct {
			set  bool
			name string
			why  string
		}{
			{d.DetailedMetric, "detailed_metric", "rlctl's metrics are per rule, never per descriptor value; remove it to import"},
			{d.ValueToMetric, "value_to_metric", "rlctl's metrics are per rule, never per descriptor value; remove it to import"},
			{d.ShareThreshold, "share_threshold", "rlctl counts each value that a wildcard matches on its own"},
		} {
			if f.set {
				im.problem(d.Fields[f.name], nil, "%s has no rlctl equivalent: %s", f.name, f.why)
			}
		}
		m := policy.Match{Key: d.Key, Value: d.Value, Kind: policy.MatchAny, Pos: d.Pos}
		switch {
		case strings.HasSuffix(d.Value, "*"):
			m.Kind = policy.MatchWildcard
		case d.Value != "":
			m.Kind = policy.MatchExact
		}
		if strings.Contains(strings.TrimSuffix(d.Value, "*"), "*") {
			im.note(d.Fields["value"], "value %q: a '*' before the end is a literal character, in ERL as in rlctl; imported as it is", d.Value)
		}
		p := append(append([]policy.Match(nil), path...), m)
		rl := d.RateLimit
		limited := rl != nil && !rl.Unlimited
		if rl != nil {
			if len(rl.Replaces) > 0 {
				im.problem(rl.Fields["replaces"], nil, "replaces has no rlctl equivalent: rlctl applies every rule a request's descriptors match")
			}
			switch {
			case rl.Unlimited:
				im.note(rl.Fields["unlimited"], "unlimited %s imported as no rule: a request that matches no rule is admitted", describe(p))
				di.comments = append(di.comments, fmt.Sprintf("%s: ERL's unlimited descriptor %s is no rule here: a request that matches no rule is admitted.", shortPos(rl.Pos), describe(p)))
			case rl.RequestsPerUnit == 0:
				if pos, ok := rl.Fields["requests_per_unit"]; ok {
					im.problem(pos, nil, "requests_per_unit 0 (deny every request) has no rlctl equivalent: a limit admits at least 1 request")
				} else {
					im.problem(rl.Pos, nil, "rate_limit has no requests_per_unit, which ERL reads as 0 (deny every request); rlctl has no equivalent: a limit admits at least 1 request")
				}
			case !(engine.Limit{Algorithm: engine.FixedWindow, Requests: int64(rl.RequestsPerUnit), Window: rl.Unit.Millis()}).ExactRangeOK():
				im.problem(rl.Fields["requests_per_unit"], nil, "requests_per_unit %d per %s is beyond rlctl's exact range: at most %d per %s ((requests + 1) × window in ms up to 2^53-1)",
					rl.RequestsPerUnit, rl.Unit, engine.MaxExact/rl.Unit.Millis()-1, rl.Unit)
			default:
				r := &importedRule{name: rl.Name, match: p, requests: rl.RequestsPerUnit, unit: rl.Unit, stage: policy.StageEnforce, pos: d.Pos}
				switch {
				case d.ShadowMode:
					r.stage = policy.StageShadow
					if d.QuotaMode {
						im.note(d.Fields["quota_mode"], "quota_mode beside shadow_mode: imported as the shadow stage, which never rejects either")
					}
				case d.QuotaMode:
					r.stage = policy.StageSoft
					im.note(d.Fields["quota_mode"], "quota_mode imported as the soft stage: it admits a request over the limit with a RateLimit-Warning header, where ERL reports it in dynamic metadata")
				}
				di.rules = append(di.rules, r)
			}
		}
		if rl == nil && len(d.Descriptors) == 0 {
			im.note(d.Pos, "descriptor %s has no rate_limit and nothing below it: imported as no rule: a request that matches no rule is admitted", describe(p))
			di.comments = append(di.comments, fmt.Sprintf("%s: ERL's descriptor %s, with no rate_limit and nothing below it, is no rule here: a request that matches no rule is admitted.", shortPos(d.Pos), describe(p)))
		}
		if !limited {
			for _, f := range []string{"shadow_mode", "quota_mode"} {
				if pos, ok := d.Fields[f]; ok && (f == "shadow_mode" && d.ShadowMode || f == "quota_mode" && d.QuotaMode) {
					im.note(pos, "%s has no effect without a limit (ERL ignores it too); not imported", f)
				}
			}
		}
		im.walk(di, d.Descriptors, p)
	}
	for i := range ds {
		d := &ds[i]
		if hasLimit(d) {
			continue
		}
		if s := captor(ds, i); s != nil {
			what := "has no rate_limit and nothing below it"
			switch {
			case d.RateLimit != nil && d.RateLimit.Unlimited:
				what = "is unlimited"
			case len(d.Descriptors) > 0:
				what = "has no rate_limit and nothing below it is limited"
			}
			im.problem(d.Pos, []policy.Pos{s.Pos}, "descriptor %s %s, so ERL admits its values that descriptor %s would limit; rlctl has no rule that exempts values from another",
				describe(append(path, policy.Match{Key: d.Key, Value: d.Value, Kind: kindOf(d.Value)})), what, describe([]policy.Match{{Key: s.Key, Value: s.Value, Kind: kindOf(s.Value)}}))
		}
	}
}

func kindOf(v string) policy.MatchKind {
	switch {
	case v == "":
		return policy.MatchAny
	case strings.HasSuffix(v, "*"):
		return policy.MatchWildcard
	}
	return policy.MatchExact
}

// hasLimit reports whether d or a descriptor below it has a limit that becomes a rule.
func hasLimit(d *Descriptor) bool {
	if rl := d.RateLimit; rl != nil && !rl.Unlimited {
		return true
	}
	for i := range d.Descriptors {
		if hasLimit(&d.Descriptors[i]) {
			return true
		}
	}
	return false
}

// captor returns a sibling with a limit whose values ds[i], which has none, takes first in ERL's
// order (an exact value, then wildcards in declared order, then the key alone), or nil.
func captor(ds []Descriptor, i int) *Descriptor {
	d := &ds[i]
	if d.Value == "" {
		return nil // key only: tried last, it takes nothing from a sibling
	}
	p, wild := strings.CutSuffix(d.Value, "*")
	for j := range ds {
		s := &ds[j]
		if j == i || s.Key != d.Key || !hasLimit(s) {
			continue
		}
		q, ok := strings.CutSuffix(s.Value, "*")
		switch {
		case s.Value == "":
			return s
		case !ok:
			// An exact sibling is tried before d.
		case !wild && strings.HasPrefix(d.Value, q):
			return s
		case wild && j > i && (strings.HasPrefix(p, q) || strings.HasPrefix(q, p)):
			return s
		}
	}
	return nil
}

// name gives every rule a unique valid name: its rate_limit's name first, then its key path.
func (di *domainImport) name() {
	taken := map[string]bool{}
	unique := func(n string) string {
		if !taken[n] {
			taken[n] = true
			return n
		}
		for i := 2; ; i++ {
			if c := fmt.Sprintf("%s_%d", n, i); !taken[c] {
				taken[c] = true
				return c
			}
		}
	}
	for _, r := range di.rules {
		switch {
		case r.name == "":
		case validName.MatchString(r.name):
			// As rlctl names it: render writes a rule's name, and import gives it back.
			r.name = unique(r.name)
		default:
			r.name = unique(sanitize(r.name))
		}
	}
	for _, r := range di.rules {
		if r.name == "" {
			var parts []string
			for _, m := range r.match {
				parts = append(parts, m.Key, strings.TrimSuffix(m.Value, "*"))
			}
			r.name = unique(sanitize(strings.Join(parts, "_")))
		}
	}
}

var (
	notNameChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)
	underscores  = regexp.MustCompile(`_+`)
)

// sanitize makes s a rule name: runs of other characters become '_', and a name that does not
// start with a letter gets the prefix "r_".
func sanitize(s string) string {
	s = strings.Trim(notNameChars.ReplaceAllString(s, "_"), "_")
	s = underscores.ReplaceAllString(s, "_")
	if s == "" || !(s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z') {
		s = "r_" + s
	}
	return strings.TrimSuffix(s, "_")
}

// shortPos is file:line, for comments.
func shortPos(p policy.Pos) string {
	return printable.String(policy.Pos{File: p.File, Line: p.Line}.String())
}

// cue writes the domain's policy file, before formatting.
func (di *domainImport) cue() []byte {
	var b bytes.Buffer
	c := di.cfg
	fmt.Fprintf(&b, "// Imported by rlctl import ratelimit from envoyproxy/ratelimit's %s.\n", printable.String(c.Pos.File))
	b.WriteString("// To finish the import, replace each source below with the one your Envoy rate_limits\n")
	b.WriteString("// actions use (see the TODO comments), then run rlctl lint.\n")
	b.WriteString("package policies\n\n")
	fmt.Fprintf(&b, "domains: %s: {\n", label(c.Domain))
	b.WriteString("sources: {\n")
	for _, k := range di.keys {
		if k == "remote_address" {
			fmt.Fprintf(&b, "// TODO(import): descriptor key %q is the key Envoy's remote_address action sends, the\n", k)
			b.WriteString("// client's address; ERL's configuration does not record the action, so check it, and set\n")
			b.WriteString("// mask: \"subnet\" if your actions mask the address.\n")
			fmt.Fprintf(&b, "%s: {kind: \"remote_address\"}\n", label(k))
			continue
		}
		fmt.Fprintf(&b, "// TODO(import): descriptor key %q: Envoy fills it from a request header, metadata or\n", k)
		b.WriteString("// another action that ERL's configuration does not record. This header is a placeholder.\n")
		fmt.Fprintf(&b, "%s: {kind: \"header\", header: %s}\n", label(k), quote(placeholderHeader(k)))
	}
	b.WriteString("}\n")
	b.WriteString("rules: {\n")
	for _, line := range di.comments {
		fmt.Fprintf(&b, "// %s\n", line)
	}
	for _, r := range di.rules {
		fmt.Fprintf(&b, "// %s: %s\n", shortPos(r.pos), describe(r.match))
		fmt.Fprintf(&b, "%s: {\n", label(r.name))
		b.WriteString("match: [")
		for i, m := range r.match {
			if i > 0 {
				b.WriteString(", ")
			}
			if m.Value == "" {
				fmt.Fprintf(&b, "{key: %s}", quote(m.Key))
			} else {
				fmt.Fprintf(&b, "{key: %s, value: %s}", quote(m.Key), quote(m.Value))
			}
		}
		b.WriteString("]\n")
		fmt.Fprintf(&b, "limits: [{requests: %d, window: %q, algorithm: \"fixed_window\"}]\n", r.requests, unitWindow(r.unit))
		if r.stage != policy.StageEnforce {
			fmt.Fprintf(&b, "stage: name: %q\n", r.stage)
		}
		b.WriteString("}\n")
	}
	b.WriteString("}\n}\n")
	return b.Bytes()
}

func unitWindow(u Unit) string {
	for _, x := range units {
		if x.unit == u {
			return x.window
		}
	}
	return ""
}

func placeholderHeader(key string) string {
	h := strings.ToLower(strings.NewReplacer(".", "-", "_", "-").Replace(key))
	if strings.HasPrefix(h, "x-") {
		return h
	}
	return "x-" + h
}

var identifier = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// label writes a field name: as it is when it is a plain CUE identifier, else quoted (a name
// starting with '_' would be a hidden field, one with '.' or '-' no identifier).
func label(s string) string {
	if identifier.MatchString(s) {
		return s
	}
	return quote(s)
}

// quote writes s as a CUE string literal.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || r == 0xfeff: // CUE's formatter refuses a byte order mark
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
