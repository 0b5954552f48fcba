package erlconfig

import (
	"fmt"
	"slices"
	"strings"
)

// ERL looks a request's entry up among a descriptor's children by text, not by key: first the
// key and value joined with '_' among the children's own joined texts (a key-only child's text
// is its key), then that text against each wildcard child's prefix, then the key alone
// (config_impl.go, GetLimit). rlctl matches an entry only against children of the same key. The
// two agree unless one key, joined with '_', starts another's text: where keys "user" and
// "user_tier" sit side by side, ERL matches the entry user="tier" to the key-only "user_tier",
// and a wildcard user="*" (the prefix "user_") takes every user_tier entry that no exact
// user_tier child matches. crossKeyMatches finds those children, so that render and import can
// say which requests ERL limits otherwise than rlctl does.

// crossKeyMatch is a descriptor that ERL also matches for entries of another key.
type crossKeyMatch struct {
	d *Descriptor
	// which entries of the other key: "a user entry of value \"tier\"", etc.
	which string
}

// crossKeyMatches walks the descriptor tree ds, to which Envoy sends descriptors of the given
// shapes (each a list of keys: the entries' keys in order), and returns every descriptor that
// ERL matches for an entry of another key that reaches it, in tree order. An entry of a shape
// reaches the children of a descriptor whose path has the shape's first keys.
func crossKeyMatches(ds []Descriptor, shapes [][]string) []crossKeyMatch {
	var out []crossKeyMatch
	var walk func(ds []Descriptor, path []string)
	walk = func(ds []Descriptor, path []string) {
		var arriving []string
		for _, s := range shapes {
			if len(s) > len(path) && slices.Equal(s[:len(path)], path) && !slices.Contains(arriving, s[len(path)]) {
				arriving = append(arriving, s[len(path)])
			}
		}
		for i := range ds {
			d := &ds[i]
			for _, k := range arriving {
				if k == d.Key {
					continue
				}
				if which := crossMatch(k, d); which != "" {
					out = append(out, crossKeyMatch{d: d, which: which})
				}
			}
			walk(d.Descriptors, append(path[:len(path):len(path)], d.Key))
		}
	}
	walk(ds, nil)
	return out
}

// crossMatch says which entries of key k (not d's key) ERL matches to d, or "" for none.
func crossMatch(k string, d *Descriptor) string {
	text, joined := compositeKey(d.Key, d.Value), k+"_"
	if prefix, ok := strings.CutSuffix(d.Value, "*"); ok {
		w := d.Key + "_" + prefix
		switch {
		case strings.HasPrefix(joined, w):
			return fmt.Sprintf("every entry of key %s that no exact %s descriptor beside it matches (%q starts with %q)", k, k, joined, w)
		case strings.HasPrefix(w, joined):
			return fmt.Sprintf("an entry of key %s whose value starts with %q", k, w[len(joined):])
		}
	}
	switch {
	case k == text:
		return fmt.Sprintf("an entry of key %s that no %s descriptor beside it matches (ERL then looks up the key alone)", k, k)
	case len(text) > len(joined) && strings.HasPrefix(text, joined):
		return fmt.Sprintf("the entry %s=%q", k, text[len(joined):])
	}
	return ""
}

// text writes d as a rule's match is written: key="value", or the key alone.
func (d *Descriptor) text() string {
	if d.Value == "" {
		return d.Key
	}
	return fmt.Sprintf("%s=%q", d.Key, d.Value)
}

// ruleOf names the rule whose limit d or the first descriptor below it holds, "" for none.
func ruleOf(d *Descriptor) string {
	if d.RateLimit != nil && d.RateLimit.Name != "" {
		return d.RateLimit.Name
	}
	for i := range d.Descriptors {
		if r := ruleOf(&d.Descriptors[i]); r != "" {
			return r
		}
	}
	return ""
}
