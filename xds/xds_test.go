package xds_test

import (
	"bytes"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/xds"
)

// TestSnapshotEncoding: a snapshot resource decodes to the very bytes it was made of, which
// policy.ReadSnapshot reads; a resource of another type, or not a bytes message, is refused.
func TestSnapshotEncoding(t *testing.T) {
	m := &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{{
		Name:   "r",
		Match:  []policy.Match{{Key: "user", Kind: policy.MatchAny}},
		Limits: []policy.Limit{{Requests: 10, WindowMs: 1000, Burst: 10, Algorithm: policy.TokenBucket, Cost: 1}},
		Stage:  policy.Stage{Name: policy.StageEnforce}, FailureMode: policy.FailOpen, StoreTimeoutMs: 5,
	}}}}}
	var buf bytes.Buffer
	if err := policy.WriteSnapshot(&buf, m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(xds.SnapshotResource(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := xds.DecodeSnapshot(&anypb.Any{TypeUrl: xds.SnapshotTypeURL, Value: b})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Fatalf("decoded snapshot differs from the written one")
	}
	if _, err := policy.ReadSnapshot(bytes.NewReader(got)); err != nil {
		t.Errorf("ReadSnapshot: %v", err)
	}

	other, _ := anypb.New(wrapperspb.Bytes(buf.Bytes()))
	for _, tc := range []struct {
		name string
		a    *anypb.Any
	}{
		{"another type", other},
		{"not bytes", &anypb.Any{TypeUrl: xds.SnapshotTypeURL, Value: []byte{0x0a, 0xff}}},
	} {
		if _, err := xds.DecodeSnapshot(tc.a); !errors.Is(err, xds.ErrResource) {
			t.Errorf("%s: got %v, want ErrResource", tc.name, err)
		}
	}
}

// TestEnforcerLinksNoCUE: the enforcer, and this package that it links, carry no CUE
// evaluator and no schema: policies are loaded by rlctl, never by the sidecar.
func TestEnforcerLinksNoCUE(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/rlctl/rlctl/cmd/rlctl-enforcer", "github.com/rlctl/rlctl/xds").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !slices.Contains(deps, "github.com/rlctl/rlctl/xds") {
		t.Fatalf("go list -deps: %d packages, without xds", len(deps))
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "cuelang.org/") || d == "github.com/rlctl/rlctl/schema" || d == "github.com/rlctl/rlctl/lint" {
			t.Errorf("rlctl-enforcer depends on %s", d)
		}
	}
}
