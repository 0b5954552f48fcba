package journal

import (
	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// DecisionOf returns the decision record of rule r's verdict v on key for a request of cost
// tokens, answered on an instance where r's mode is m: the fields the enforcer writes and Replay
// compares. The caller sets the time, the call's seq and index, the domain, the config
// generation and any limit override.
func DecisionOf(r *policy.Rule, key string, cost int64, v engine.Verdict, m policy.Mode) Record {
	rec := Record{Kind: KindDecision, Rule: r.Name, Key: key, Cost: cost, Via: v.Via.String(),
		Engine: CodeOK, Code: CodeOK, Remaining: v.Remaining, ResetMs: v.ResetMs}
	if r.Stage.Name != policy.StageEnforce {
		rec.Stage = string(r.Stage.Name)
	}
	if v.Over {
		rec.Engine, rec.ResetMs = CodeOver, v.RetryMs
		if m == policy.ModeEnforce {
			rec.Code = CodeOver
		}
	}
	return rec
}
