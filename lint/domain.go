package lint

import "github.com/rlctl/rlctl/policy"

// checkEmptyDomain reports a domain without rules (RL029): it limits nothing.
func checkEmptyDomain(d *policy.Domain, e *emitter) {
	if len(d.Rules) == 0 {
		e.at(d.Pos, nil, "defines no rules: the enforcer admits every request that names it, without limiting")
	}
}
