package lint

import (
	"fmt"
	"strings"
	"time"

	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of a rule's rollout: stage start dates (RL014) and region shares
// (RL015). A canary's share (RL013) is the model's own check (policy.Model.Validate), which the
// schema makes too.

// checkStageSince reports a stage that will advance (shadow, soft, canary) without a valid start
// date (RL014). Enforce is the last stage, and the loader's default when a rule names none; its
// date is only informative.
func checkStageSince(_ *policy.Domain, r *policy.Rule, e *emitter) {
	st := r.Stage
	if st.Name == policy.StageEnforce {
		return
	}
	if st.Since == "" {
		e.at(st.Pos, r, "stage %q has no start date (since): write stage: {name: %q, since: \"YYYY-MM-DD\"}", st.Name, st.Name)
		return
	}
	if _, err := time.Parse(time.DateOnly, st.Since); err != nil {
		e.at(st.Pos, r, "stage %q since %q is not a date YYYY-MM-DD", st.Name, st.Since)
	}
}

// checkRegions reports region shares that do not sum to 100% (RL015).
func checkRegions(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if len(r.Regions) == 0 {
		return
	}
	sum := 0
	parts := make([]string, len(r.Regions))
	for i, rs := range r.Regions {
		sum += rs.Percent
		parts[i] = fmt.Sprintf("%s %d%%", rs.Region, rs.Percent)
	}
	if sum != 100 {
		e.at(r.PosOf(policy.SettingRegions), r, "region shares sum to %d%%, want 100%%: %s", sum, strings.Join(parts, " + "))
	}
}
