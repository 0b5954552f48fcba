package erlconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rlctl/rlctl/policy"
)

// Parse decodes name's data as one ERL configuration document. It is stricter than ERL's loader
// and refuses everything that loader refuses: YAML that does not parse, a key ERL does not know
// or a known key where it does not belong (ERL accepts any of its keys at any level and ignores
// the misplaced ones), a value of the wrong type, a key given twice in one mapping, no domain, a
// descriptor without a key, an unknown unit, a valid unit beside unlimited, a replaces entry
// without a name or naming its own limit, share_threshold on a value that is not a wildcard, and
// two descriptors of one level that ERL reads as the same (it joins key and value with '_'). More
// than one YAML document in the file is refused too: ERL reads the first. Merge keys (<<) are
// applied as ERL's YAML decoder applies them (see writes).
//
// The error is a policy.Problems with every problem found, each at its file:line:col. The
// returned Config records the position of each descriptor and of each key read.
func Parse(name string, data []byte) (*Config, error) {
	p := &parser{file: name}
	c := p.parse(data)
	if len(p.probs) > 0 {
		p.probs.Sort()
		return nil, p.probs
	}
	return c, nil
}

type parser struct {
	file  string
	probs policy.Problems
	// reported holds each problem added, so that a node read twice (through aliases or merge
	// keys) is reported once.
	reported map[string]bool
}

func (p *parser) pos(n *yaml.Node) policy.Pos {
	return policy.Pos{File: p.file, Line: n.Line, Col: n.Column}
}

func (p *parser) errorf(pos policy.Pos, format string, args ...any) {
	p.problem(policy.Problem{Pos: pos, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) problem(pr policy.Problem) {
	id := pr.String()
	if p.reported[id] {
		return
	}
	if p.reported == nil {
		p.reported = map[string]bool{}
	}
	p.reported[id] = true
	p.probs = append(p.probs, pr)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func (p *parser) parse(data []byte) *Config {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(policy.Pos{File: p.file}, "empty file: an ERL configuration has a domain and descriptors")
			return nil
		}
		p.syntax(err)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		p.errorf(p.pos(&next), "a second YAML document: ERL reads one document per file")
	case !errors.Is(err, io.EOF):
		p.syntax(err)
	}
	if len(doc.Content) == 0 {
		p.errorf(policy.Pos{File: p.file}, "empty file: an ERL configuration has a domain and descriptors")
		return nil
	}
	if a := cyclicAlias(doc.Content[0], map[*yaml.Node]int8{}); a != nil {
		// Every walk of the document below follows aliases: a cycle would not end.
		p.errorf(p.pos(a), "alias *%s names a node that holds it: the YAML is cyclic", a.Value)
		return nil
	}
	if n := expanded(doc.Content[0], map[*yaml.Node]int{}); n > maxExpanded {
		// Aliases of aliases grow a short file exponentially ("billion laughs").
		p.errorf(p.pos(doc.Content[0]), "aliases expand the document to over %d nodes: ERL's YAML reader refuses such aliasing too", maxExpanded)
		return nil
	}
	nonSpecificStrings(doc.Content[0], data)
	root := resolve(doc.Content[0])
	c := &Config{Pos: p.pos(root)}
	p.mapping(root, "the document", []string{"domain", "descriptors"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			c.Domain = p.str(key, v)
			c.Pos = p.pos(k)
		case "descriptors":
			c.Descriptors = p.descriptors(v)
		}
	})
	if c.Domain == "" && root.Kind == yaml.MappingNode {
		p.errorf(p.pos(root), "no domain: an ERL configuration names its domain")
	}
	return c
}

// syntax reports a YAML syntax error at the line the decoder names.
func (p *parser) syntax(err error) {
	msg := err.Error()
	pos := policy.Pos{File: p.file}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		pos.Line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(msg, m[0])
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	p.errorf(pos, "bad YAML: %s", msg)
}

// cyclicAlias returns an alias under n that names a node holding it, or nil: a depth-first
// walk that follows aliases, each node visited once (state: 1 while its content is walked, 2
// after).
func cyclicAlias(n *yaml.Node, state map[*yaml.Node]int8) *yaml.Node {
	target := n
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil
		}
		target = n.Alias
	}
	switch state[target] {
	case 1:
		return n
	case 2:
		return nil
	}
	state[target] = 1
	for _, c := range target.Content {
		if a := cyclicAlias(c, state); a != nil {
			return a
		}
	}
	state[target] = 2
	return nil
}

// maxExpanded bounds the nodes of a document with its aliases expanded. A million nodes is a
// configuration far larger than any ERL deployment's, read in well under a second.
const maxExpanded = 1_000_000

// expanded returns how many nodes a walk of n that follows aliases visits, counted once per
// node (memo) and capped just over maxExpanded. n holds no cyclic alias.
func expanded(n *yaml.Node, memo map[*yaml.Node]int) int {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return 1 + expanded(n.Alias, memo)
	}
	if c, ok := memo[n]; ok {
		return c
	}
	count := 1
	for _, c := range n.Content {
		count = min(count+expanded(c, memo), maxExpanded+1)
	}
	memo[n] = count
	return count
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// mapping calls f for each key and value that ERL's YAML decoder writes when it decodes mapping n
// into a struct (see writes), in that order, so that a later write of a key replaces an earlier
// one. It refuses n when it is not a mapping and each key that is not in keys, and returns the
// position of the key of each field's last write.
func (p *parser) mapping(n *yaml.Node, what string, keys []string, f func(key string, k, v *yaml.Node)) map[string]policy.Pos {
	if n.Kind != yaml.MappingNode {
		p.errorf(p.pos(n), "%s must be a mapping", what)
		return nil
	}
	fields := map[string]policy.Pos{}
	pairs := p.writes(n, what)
	for i := 0; i+1 < len(pairs); i += 2 {
		k, v := pairs[i], pairs[i+1]
		key := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			p.errorf(p.pos(k), "a key of %s is not a string", what)
			continue
		case !contains(keys, key):
			p.errorf(p.pos(k), "unknown key %q in %s (want %s)", key, what, strings.Join(keys, ", "))
			continue
		}
		fields[key] = p.pos(k)
		if v.Kind == yaml.ScalarNode && !p.erlScalar(key, v) {
			continue
		}
		f(key, k, v)
	}
	return fields
}

// erlScalar reports whether ERL's loader takes scalar v as a value, and refuses it when not. That
// loader (validateYamlKeys) takes a string, a whole number that fits an int64, true, false or null,
// and refuses the whole file for any other: a limit of 10.9 would not load there, nor be read as 10
// here. Its YAML decoder reads a whole number from 2^63 to 2^64-1 as a uint64.
func (p *parser) erlScalar(key string, v *yaml.Node) bool {
	switch v.Tag {
	case "!!float":
		p.errorf(p.pos(v), "%s %s is a number with a fraction or an exponent, which ERL refuses (quote it for a string)", key, v.Value)
		return false
	case "!!int":
		var x any
		if err := v.Decode(&x); err == nil {
			if _, ok := x.(uint64); ok {
				p.errorf(p.pos(v), "%s %s is a whole number from 2^63 to 2^64-1, which ERL's loader refuses (quote it for a string)", key, v.Value)
				return false
			}
		}
	}
	return true
}

// writes returns the keys and values, aliases resolved, that ERL's YAML decoder (gopkg.in/yaml.v2
// decoding into structs) writes for mapping n, in the order it writes them: n's own pairs as they
// stand, a merge key ("<<: *defaults") where it stands by the pairs of the mapping it names, and a
// merge of a sequence of mappings by theirs, last mapping first. So a key after a merge overrides
// the merged value, a merge after a key overrides the key, and of two merged mappings the first
// wins. A key that n gives twice is refused (ERL would take the second).
func (p *parser) writes(n *yaml.Node, what string) []*yaml.Node {
	var out []*yaml.Node
	given := map[string]policy.Pos{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			ms := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				ms = nil
				for _, m := range slices.Backward(v.Content) {
					ms = append(ms, resolve(m))
				}
			}
			for _, m := range ms {
				if m.Kind != yaml.MappingNode {
					p.errorf(p.pos(m), "a merge key (<<) must name a mapping")
					continue
				}
				out = append(out, p.writes(m, what)...)
			}
			continue
		}
		if k.Kind == yaml.ScalarNode {
			if prev, ok := given[k.Value]; ok {
				p.problem(policy.Problem{Pos: p.pos(k), Related: []policy.Pos{prev},
					Message: fmt.Sprintf("key %q is given twice in %s", k.Value, what)})
				continue
			}
			given[k.Value] = p.pos(k)
		}
		out = append(out, k, v)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"}
var rateLimitKeys = []string{"unit", "requests_per_unit", "name", "unlimited", "replaces"}

// descriptors reads a descriptor list and refuses two descriptors that ERL reads as one.
func (p *parser) descriptors(n *yaml.Node) []Descriptor {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(p.pos(n), "descriptors must be a list")
		return nil
	}
	var ds []Descriptor
	seen := map[string]policy.Pos{}
	for _, e := range n.Content {
		e = resolve(e)
		d := Descriptor{Pos: p.pos(e)}
		var rl rateLimitDecoding
		d.Fields = p.mapping(e, "a descriptor", descriptorKeys, func(key string, k, v *yaml.Node) {
			switch key {
			case "key":
				d.Key = p.str(key, v)
			case "value":
				d.Value = p.str(key, v)
			case "rate_limit":
				p.rateLimit(&rl, v)
			case "descriptors":
				d.Descriptors = p.descriptors(v)
			case "shadow_mode":
				d.ShadowMode = p.bool(key, v)
			case "quota_mode":
				d.QuotaMode = p.bool(key, v)
			case "detailed_metric":
				d.DetailedMetric = p.bool(key, v)
			case "value_to_metric":
				d.ValueToMetric = p.bool(key, v)
			case "share_threshold":
				d.ShareThreshold = p.bool(key, v)
			}
		})
		d.RateLimit = p.checkRateLimit(&rl)
		if e.Kind != yaml.MappingNode {
			continue
		}
		if d.Key == "" {
			p.errorf(d.Pos, "descriptor has no key")
			continue
		}
		if d.ShareThreshold && !strings.HasSuffix(d.Value, "*") {
			p.errorf(d.Fields["share_threshold"], "share_threshold needs a wildcard value (ending in '*')")
		}
		if rl := d.RateLimit; rl != nil {
			for _, r := range rl.Replaces {
				if r.Name != "" && r.Name == rl.Name {
					p.errorf(r.Pos, "replaces names the limit's own name %q", r.Name)
				}
			}
		}
		ck := compositeKey(d.Key, d.Value)
		if prev, ok := seen[ck]; ok {
			p.problem(policy.Problem{Pos: d.Pos, Related: []policy.Pos{prev},
				Message: fmt.Sprintf("duplicate descriptor %q: ERL reads it as the one before (it joins key and value with '_')", ck)})
			continue
		}
		seen[ck] = d.Pos
		ds = append(ds, d)
	}
	return ds
}

// rateLimitDecoding is a descriptor's rate_limit while the descriptor is read. ERL's YAML decoder
// writes every mapping given for it (by the descriptor and by merge keys) into one struct, each
// setting the fields it gives and keeping the others; a null clears it.
type rateLimitDecoding struct {
	rl       *RateLimit
	unit     string
	unitNode *yaml.Node // the unit's value, nil when none was given
}

// rateLimit writes mapping n into the rate_limit being read.
func (p *parser) rateLimit(d *rateLimitDecoding, n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		if n.Style&yaml.TaggedStyle != 0 || n.Value == "~" || n.Value == "null" || n.Value == "" {
			*d = rateLimitDecoding{}
			return
		}
		// yaml.v2 clears a pointer only for those nulls: "Null" or "NULL" leaves an empty
		// rate_limit, which ERL then refuses for its empty unit.
		*d = rateLimitDecoding{rl: &RateLimit{Pos: p.pos(n), Fields: map[string]policy.Pos{}}}
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(p.pos(n), "a rate_limit must be a mapping")
		return
	}
	if d.rl == nil {
		d.rl = &RateLimit{Fields: map[string]policy.Pos{}}
	}
	rl := d.rl
	rl.Pos = p.pos(n)
	fields := p.mapping(n, "a rate_limit", rateLimitKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "unit":
			d.unit, d.unitNode = p.str(key, v), v
		case "requests_per_unit":
			rl.RequestsPerUnit = 0 // a null is 0, as in ERL
			if err := v.Decode(&rl.RequestsPerUnit); err != nil || v.Kind != yaml.ScalarNode {
				p.errorf(p.pos(v), "requests_per_unit must be a whole number from 0 to 4294967295")
			}
		case "name":
			rl.Name = p.str(key, v)
		case "unlimited":
			rl.Unlimited = p.bool(key, v)
		case "replaces":
			rl.Replaces = p.replaces(v)
		}
	})
	maps.Copy(rl.Fields, fields)
}

// checkRateLimit returns the rate_limit read, with its unit, refusing a unit ERL refuses: none,
// or an unknown one, on a limit; a valid one beside unlimited (ERL ignores an unknown one there).
func (p *parser) checkRateLimit(d *rateLimitDecoding) *RateLimit {
	rl := d.rl
	if rl == nil {
		return nil
	}
	u, ok := ParseUnit(d.unit)
	switch {
	case rl.Unlimited && ok:
		p.errorf(p.pos(d.unitNode), "unit %q beside unlimited: an unlimited limit has no unit", d.unit)
	case rl.Unlimited:
	case d.unitNode == nil:
		p.errorf(rl.Pos, "rate_limit has no unit (want second, minute, hour, day, week, month or year)")
	case !ok:
		p.errorf(p.pos(d.unitNode), "unknown unit %q (want second, minute, hour, day, week, month or year)", d.unit)
	default:
		rl.Unit = u
	}
	return rl
}

func (p *parser) replaces(n *yaml.Node) []Replace {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(p.pos(n), "replaces must be a list")
		return nil
	}
	var rs []Replace
	for _, e := range n.Content {
		e = resolve(e)
		r := Replace{Pos: p.pos(e)}
		p.mapping(e, "a replaces entry", []string{"name"}, func(key string, k, v *yaml.Node) { r.Name = p.str(key, v) })
		if r.Name == "" && e.Kind == yaml.MappingNode {
			p.errorf(r.Pos, "replaces entry has no name")
		}
		rs = append(rs, r)
	}
	return rs
}

// str reads a scalar as ERL does: any scalar is its text, null is empty.
func (p *parser) str(key string, n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		p.errorf(p.pos(n), "%s must be a string", key)
		return ""
	}
	switch n.Tag {
	case "!!null":
		return ""
	case "!!binary":
		// ERL's YAML decoder gives a string the bytes the base64 text decodes to.
		var s string
		if err := n.Decode(&s); err != nil {
			p.errorf(p.pos(n), "%s: %v", key, err)
		}
		return s
	}
	return n.Value
}

func (p *parser) bool(key string, n *yaml.Node) bool {
	var b bool
	if err := n.Decode(&b); err != nil || n.Kind != yaml.ScalarNode {
		p.errorf(p.pos(n), "%s must be true or false", key)
	}
	return b
}
