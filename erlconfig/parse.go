package erlconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rlctl/rlctl/policy"
)

// Parse decodes name's data as one ERL configuration document. It is stricter than ERL's loader
// and refuses everything that loader refuses: YAML that does not parse, a key ERL does not know
// or a known key where it does not belong (ERL accepts any of its keys at any level and ignores
// the misplaced ones), a value of the wrong type, a key given twice, no domain, a descriptor
// without a key, an unknown unit, a unit beside unlimited, a replaces entry without a name or
// naming its own limit, share_threshold on a value that is not a wildcard, and two descriptors
// of one level that ERL reads as the same (it joins key and value with '_'). More than one YAML
// document in the file is refused too: ERL reads the first.
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
}

func (p *parser) pos(n *yaml.Node) policy.Pos {
	return policy.Pos{File: p.file, Line: n.Line, Col: n.Column}
}

func (p *parser) errorf(pos policy.Pos, format string, args ...any) {
	p.probs = append(p.probs, policy.Problem{Pos: pos, Message: fmt.Sprintf(format, args...)})
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

// mapping calls f for each key of n, in order, refusing n when it is not a mapping and each key
// that is not in keys or is given twice.
func (p *parser) mapping(n *yaml.Node, what string, keys []string, f func(key string, k, v *yaml.Node)) map[string]policy.Pos {
	if n.Kind != yaml.MappingNode {
		p.errorf(p.pos(n), "%s must be a mapping", what)
		return nil
	}
	seen := map[string]policy.Pos{}
	pairs := p.merged(n)
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
		if prev, ok := seen[key]; ok {
			p.probs = append(p.probs, policy.Problem{Pos: p.pos(k), Related: []policy.Pos{prev},
				Message: fmt.Sprintf("key %q is given twice in %s", key, what)})
			continue
		}
		seen[key] = p.pos(k)
		if v.Kind == yaml.ScalarNode && v.Tag == "!!float" {
			// ERL's loader (validateYamlKeys) takes a string, a whole number, true, false or
			// null as a value, and refuses the whole file for any other: a limit of 10.9 would
			// not load there, nor be read as 10 here.
			p.errorf(p.pos(v), "%s %s is a number with a fraction or an exponent, which ERL refuses (quote it for a string)", key, v.Value)
			continue
		}
		f(key, k, v)
	}
	return seen
}

// merged returns mapping n's key and value nodes, aliases resolved, with YAML merge keys
// ("<<: *defaults", or a sequence of such) resolved as ERL's YAML decoder resolves them: a
// merged mapping's pairs follow n's own, without those whose key n gives itself or an earlier
// merged mapping gave.
func (p *parser) merged(n *yaml.Node) []*yaml.Node {
	var own, merges []*yaml.Node
	given := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					merges = append(merges, resolve(m))
				}
			} else {
				merges = append(merges, v)
			}
			continue
		}
		own = append(own, k, v)
		if k.Kind == yaml.ScalarNode {
			given[k.Value] = true
		}
	}
	for _, m := range merges {
		if m.Kind != yaml.MappingNode {
			p.errorf(p.pos(m), "a merge key (<<) must name a mapping")
			continue
		}
		from := p.merged(m)
		for i := 0; i+1 < len(from); i += 2 {
			if k := from[i]; k.Kind != yaml.ScalarNode || !given[k.Value] {
				own = append(own, k, from[i+1])
				given[k.Value] = true
			}
		}
	}
	return own
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
		d.Fields = p.mapping(e, "a descriptor", descriptorKeys, func(key string, k, v *yaml.Node) {
			switch key {
			case "key":
				d.Key = p.str(key, v)
			case "value":
				d.Value = p.str(key, v)
			case "rate_limit":
				d.RateLimit = p.rateLimit(v)
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
			p.probs = append(p.probs, policy.Problem{Pos: d.Pos, Related: []policy.Pos{prev},
				Message: fmt.Sprintf("duplicate descriptor %q: ERL reads it as the one before (it joins key and value with '_')", ck)})
			continue
		}
		seen[ck] = d.Pos
		ds = append(ds, d)
	}
	return ds
}

func (p *parser) rateLimit(n *yaml.Node) *RateLimit {
	rl := &RateLimit{Pos: p.pos(n)}
	var unit string
	var unitNode *yaml.Node
	rl.Fields = p.mapping(n, "a rate_limit", rateLimitKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "unit":
			unit, unitNode = p.str(key, v), v
		case "requests_per_unit":
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
	u, ok := ParseUnit(unit)
	switch {
	case rl.Unlimited && unit != "":
		p.errorf(p.pos(unitNode), "unit %q beside unlimited: an unlimited limit has no unit", unit)
	case rl.Unlimited:
	case unitNode == nil:
		if n.Kind == yaml.MappingNode {
			p.errorf(rl.Pos, "rate_limit has no unit (want second, minute, hour, day, week, month or year)")
		}
	case !ok:
		p.errorf(p.pos(unitNode), "unknown unit %q (want second, minute, hour, day, week, month or year)", unit)
	default:
		rl.Unit = u
	}
	return rl
}

func (p *parser) replaces(n *yaml.Node) []Replace {
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
