package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/buildinfo"
)

// TestVersionRevision: the VCS revision the build recorded is printed in both formats, marked
// when the tree was modified. The build info is faked: this test binary records none.
func TestVersionRevision(t *testing.T) {
	const rev = "4f9c2e1d0b8a7c6e5f4a3b2c1d0e9f8a7b6c5d4e"
	platform := runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		settings []debug.BuildSetting
		text     string // a substring of the text output
		json     buildinfo.Info
	}{
		{nil, platform + ")\n", buildinfo.Info{}},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}},
			", revision " + rev + ")\n", buildinfo.Info{Revision: rev}},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}},
			", revision " + rev + ", modified)\n", buildinfo.Info{Revision: rev, Modified: true}},
	}
	defer func(f func() (*debug.BuildInfo, bool)) { readBuildInfo = f }(readBuildInfo)
	for i, tt := range tests {
		readBuildInfo = func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: tt.settings}, true }
		var out, errOut bytes.Buffer
		if code := Main([]string{"version"}, nil, &out, &errOut); code != 0 {
			t.Fatalf("step %d: exit %d: %s", i, code, errOut.String())
		}
		if text := out.String(); !strings.HasPrefix(text, "rlctl dev (go") || !strings.HasSuffix(text, tt.text) {
			t.Errorf("step %d: got %q, want it to end with %q", i, out.String(), tt.text)
		}
		out.Reset()
		if code := Main([]string{"version", "-o", "json"}, nil, &out, &errOut); code != 0 {
			t.Fatalf("step %d: exit %d: %s", i, code, errOut.String())
		}
		var got buildinfo.Info
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Revision != tt.json.Revision || got.Modified != tt.json.Modified {
			t.Errorf("step %d: got revision %q modified %v, want %q %v", i, got.Revision, got.Modified, tt.json.Revision, tt.json.Modified)
		}
	}
}
