package lint

import (
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// checkEnvoyKeys reports descriptor keys that envoyproxy/ratelimit would confuse (RL018). Its
// lookup joins an entry's key and value with '_' ("user" and "agent" give "user_agent") and looks
// that up among the exact matches of the level, then tries every wildcard of the level as a prefix
// of it, whatever the wildcard's key. So at one level of the match tree, a key that is another key
// plus "_" and more ("user" and "user_agent"; "tenant" with value "id" and the key "tenant_id")
// can select the other key's rule there, and not in rlctl, which compares keys exactly. Each
// colliding pair is reported once, at the later of the two match entries.
func checkEnvoyKeys(d *policy.Domain, e *emitter) {
	type keyAt struct {
		key  string
		rule *policy.Rule
		pos  policy.Pos
	}
	levels := map[string][]keyAt{} // parent match path (policy.MatchKey) → keys below it, in order
	for _, r := range d.Rules {
		for level, m := range r.Match {
			parent := policy.MatchKey(r.Match[:level])
			keys := levels[parent]
			seen := false
			for _, k := range keys {
				if k.key == m.Key {
					seen = true
					break
				}
			}
			if seen {
				continue
			}
			for _, k := range keys {
				short, long := k.key, m.Key
				if len(short) > len(long) {
					short, long = long, short
				}
				if strings.HasPrefix(long, short+"_") {
					e.at(m.Pos, r, "match key %q at level %d and key %q of rule %q at %s collide on envoyproxy/ratelimit, which looks up %q + \"_\" + value: there a descriptor of one key can select the other's rule; rlctl compares keys exactly",
						m.Key, level+1, k.key, k.rule.Name, k.pos, short)
				}
			}
			levels[parent] = append(keys, keyAt{m.Key, r, m.Pos})
		}
	}
}
