package render

import (
	"bytes"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/policy"
)

func init() { register(ratelimitTarget) }

// ratelimitTarget is envoyproxy/ratelimit's configuration: one file per domain, converted by
// erlconfig.FromModel, whose documentation says what is exact and what is approximated.
var ratelimitTarget = Target{
	Name:      "ratelimit",
	Formats:   []string{"yaml", "json"},
	MultiFile: true,
	Doc:       "envoyproxy/ratelimit configuration, one file per domain (DOMAIN.yaml)",
	// A YAML file with the header rlctl writes (erlconfig.Config.Marshal): a JSON file has no
	// room for one, and ERL's directory may hold hand-written configs.
	owns: func(_ string, head []byte, format string) bool {
		return format == "yaml" && bytes.HasPrefix(head, []byte("# envoyproxy/ratelimit configuration of domain ")) &&
			bytes.Contains(head, []byte(", rendered by rlctl from its policy.\n"))
	},
	render: func(m *policy.Model, o Options) (Result, error) {
		cfgs, notes := erlconfig.FromModel(m)
		var res Result
		for _, c := range cfgs {
			data, err := c.Marshal(erlconfig.Format(o.Format))
			if err != nil {
				return Result{}, err
			}
			res.Files = append(res.Files, File{Name: c.Domain + "." + o.Format, Data: data})
		}
		for _, n := range notes {
			res.Findings = append(res.Findings, Finding{
				Severity: Severity(n.Severity),
				Domain:   n.Domain,
				Rule:     n.Rule,
				Message:  n.Message,
				Pos:      n.Pos,
			})
		}
		return res, nil
	},
}
