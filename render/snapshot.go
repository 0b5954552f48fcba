package render

import (
	"bytes"

	"github.com/rlctl/rlctl/policy"
)

func init() { register(snapshotTarget) }

// snapshotTarget is the enforcer's versioned JSON snapshot (policy.WriteSnapshot).
var snapshotTarget = Target{
	Name:    "snapshot",
	Formats: []string{"json"},
	Doc:     "the compiled model as the versioned snapshot that rlctl-enforcer loads (snapshot.json)",
	render: func(m *policy.Model, _ Options) (Result, error) {
		var buf bytes.Buffer
		if err := policy.WriteSnapshot(&buf, m); err != nil {
			return Result{}, err
		}
		return Result{Files: []File{{Name: "snapshot.json", Data: buf.Bytes()}}}, nil
	},
}
