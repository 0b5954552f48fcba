package render

import (
	"bytes"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
)

// TestSnapshotGolden renders the example policies' snapshot and reads it back as the enforcer
// does.
func TestSnapshotGolden(t *testing.T) {
	res, err := snapshotTarget.Render(loadModel(t, "../policies"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || res.Files[0].Name != "snapshot.json" {
		t.Fatalf("files: got %v, want snapshot.json alone", res.Files)
	}
	golden.Check(t, "testdata/snapshot/policies.snapshot.json", res.Files[0].Data)
	if _, err := policy.ReadSnapshot(bytes.NewReader(res.Files[0].Data)); err != nil {
		t.Errorf("ReadSnapshot: %v", err)
	}
}
