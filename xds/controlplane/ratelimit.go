package controlplane

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/policy"
)

// rateLimitConfigs converts m into envoyproxy/ratelimit's RateLimitConfig resources, one per
// domain, keyed by the domain's name: the conversion the ratelimit render target makes
// (erlconfig.FromModel), and what xDS carries otherwise (erlconfig.Config.Proto: quota_mode as
// shadow_mode). What it approximates or assumes comes back as lines for the log, as `rlctl
// render --target ratelimit` reports them.
func rateLimitConfigs(m *policy.Model) (map[string]proto.Message, []string) {
	cfgs, notes := erlconfig.FromModel(m)
	out := make(map[string]proto.Message, len(cfgs))
	for _, c := range cfgs {
		pc, ns := c.Proto()
		out[c.Domain] = pc
		notes = append(notes, ns...)
	}
	lines := make([]string, len(notes))
	for i, n := range notes {
		where := n.Domain
		if n.Rule != "" {
			where += "/" + n.Rule
		}
		lines[i] = fmt.Sprintf("%s: %s: %s", n.Severity, where, n.Message)
		if p := n.Pos.String(); p != "" {
			lines[i] += " (" + p + ")"
		}
	}
	return out, lines
}
